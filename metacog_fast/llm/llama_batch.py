"""Many sequences in one llama.cpp decode: batched generation and option scoring.

All use of llama-cpp-python's low-level batch API (a second ``llama_context`` on
the loaded model, ``llama_batch`` with a sequence id per token, ``llama_memory_seq_*``,
per-sequence ``llama_sampler`` chains) lives in this module.

Layout: the batch context has one KV *stream* per sequence id (``kv_unified=False``):
each sequence attends only to its own ``n_ctx_seq`` cells, so attention costs what
it costs a single sequence (a unified buffer makes every query scan every
sequence's cells: prefilling N prompts then costs O(N^2)). A stream keeps its
tokens after a call (a *slot*), so the next call's prompt that extends them (a
town agent's next step, an episode's next step) evaluates only the new tokens.
Identical prompts (``n`` samples) are evaluated once and copied stream to stream.

Exactness, measured on this llama.cpp CPU build (docs/llm.md): a token's logits
depend on (a) whether its ubatch has ``GEMM_ROWS`` (64) or more rows of its
sequence (flash attention then takes a tiled kernel that differs from the per-row
one by far more than rounding), and (b) where its sequence's cells sit (the tiled
kernel reads cells in 64-cell tiles; both kernels sum cells in index order). In
its own stream a sequence's cells are its positions, as in the single-sequence
context, and every row here is computed in a ubatch of the same class as a cold
single-sequence ``Llama.eval`` uses (prompt chunks of ``n_batch`` tokens; one row
per decode step). So each sequence's logits equal the single-sequence ones bit for
bit, whatever else is in the batch. The sampler chain per sequence is the one
``Llama.generate`` builds (top-k off, typical 1, top-p, min-p 0, temperature,
``dist(seed)``; greedy at temperature 0), seeded per sequence.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from metacog_fast.llm.llama_session import text_logprobs
from metacog_fast.llm.params import find_stop

GEMM_ROWS = 64
"""Ubatches with at least this many rows of one sequence take llama.cpp's tiled flash-attention
kernel (measured: the same token's logits differ by ~0.7 between a 63- and a 64-row ubatch, and
not at all within a class)."""

DECODE_ROWS = GEMM_ROWS - 1
"""Most sequences in one decode-step ``llama_decode`` (kept in the single-row class)."""


def ref_classes(n: int, n_batch: int) -> np.ndarray:
    """[n] bool: whether each of ``n`` tokens fed from position 0 in chunks of ``n_batch``
    (as ``Llama.eval`` does) is computed in a large ubatch."""
    out = np.zeros(n, dtype=bool)
    for off in range(0, n, n_batch):
        size = min(n_batch, n - off)
        out[off: off + size] = size >= GEMM_ROWS
    return out


def score_classes(n: int, n_batch: int) -> np.ndarray:
    """Row classes of a scored prompt of ``n`` tokens: ``llama_session.score`` evaluates all but the
    last token in chunks, then the last token together with a (short) option: a small ubatch."""
    out = np.zeros(n, dtype=bool)
    out[: n - 1] = ref_classes(n - 1, n_batch)
    return out


@dataclass(frozen=True)
class SeqRequest:
    """One sequence to generate."""

    tokens: list[int]
    """Prompt tokens (non-empty)."""
    max_tokens: int
    """Most tokens to generate (cut to the room left in the sequence's stream)."""
    temperature: float
    """0 = greedy."""
    top_p: float
    """Nucleus mass in (0, 1]."""
    seed: int
    """Seed of this sequence's sampler."""
    stop: tuple[str, ...] = ()
    """Stop strings; the text ends before the first one."""
    logprobs: bool = False
    """Also return each generated token's log-probability under the model (``SeqSample.token_logprobs``)."""


@dataclass(frozen=True)
class SeqSample:
    """One generated sequence (the batched counterpart of ``llama_session.Sample``)."""

    text: str
    tokens: list[int]
    finish_reason: str
    seconds: float
    prefill_seconds: float
    decode_seconds: float
    cached_tokens: int
    token_logprobs: tuple[float, ...] | None = None
    """With ``logprobs``: as ``llama_session.Sample.token_logprobs``."""
    token_ends: tuple[int, ...] | None = None
    """With ``logprobs``: as ``llama_session.Sample.token_ends``."""


@dataclass
class _Slot:
    tokens: list[int]
    """Tokens whose keys/values the stream holds, positions 0..len-1."""
    classes: np.ndarray
    """[len(tokens)] bool: row computed in a large ubatch."""
    last_use: int


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x = np.asarray(a[:n], dtype=np.int64)
    y = np.asarray(b[:n], dtype=np.int64)
    diff = np.nonzero(x != y)[0]
    return int(diff[0]) if diff.size else n


def usable_prefix(cached: Sequence[int], cached_cls: np.ndarray, want: Sequence[int], want_cls: np.ndarray,
                  n_batch: int) -> int:
    """How many leading cached rows a prompt can keep so that every row it evaluates anew is
    computed in the class the cold single-sequence path uses (and its last row is re-decoded)."""
    n = min(_lcp(cached, want), len(want) - 1)
    if n <= 0:
        return 0
    diff = np.nonzero(cached_cls[:n] != want_cls[:n])[0]
    n = int(diff[0]) if diff.size else n
    # the rest of n's reference chunk is evaluated in one ubatch: it must keep that chunk's class
    chunk_start = (n // n_batch) * n_batch
    chunk_end = min(chunk_start + n_batch, len(want))
    if want_cls[n]:
        small = np.nonzero(~want_cls[n:chunk_end])[0]  # a scored prompt's last row is small
        if small.size:
            chunk_end = n + int(small[0])
        if chunk_end - n < GEMM_ROWS:
            n = max(chunk_start, chunk_end - GEMM_ROWS)
    return n


def _logsumexp(row: np.ndarray) -> float:
    # the same arithmetic as llama_session.score, so batched and single scores agree bit for bit
    r = row.astype(np.float64)
    m = float(r.max())
    return m + float(np.log(np.exp(r - m).sum()))


class LlamaBatchEngine:
    """Batched decoding of many sequences on the model of one ``llama_cpp.Llama`` (not thread-safe).

    ``n_seq_max`` streams of ``n_ctx_seq`` KV cells each (allocated up front);
    ``n_batch``: the chunk size of the single-sequence path whose row classes are
    reproduced (``Llama``'s ``n_batch``), and the most tokens per ``llama_decode``.
    """

    def __init__(self, llama: Any, *, n_ctx_seq: int, n_seq_max: int, n_batch: int, n_threads: int,
                 lora_adapter: Any = None) -> None:
        import llama_cpp

        self._lib = llama_cpp
        self.llama = llama
        cap = int(llama_cpp.llama_max_parallel_sequences())
        if isinstance(n_seq_max, bool) or not isinstance(n_seq_max, int) or not 1 <= n_seq_max <= cap:
            raise ValueError(f"batch_n_seq_max: expected an int in [1, {cap}], got {n_seq_max!r}")
        if isinstance(n_batch, bool) or not isinstance(n_batch, int) or n_batch < GEMM_ROWS:
            raise ValueError(f"n_batch: expected an int >= {GEMM_ROWS} for batched decoding, got {n_batch!r}")
        if isinstance(n_ctx_seq, bool) or not isinstance(n_ctx_seq, int) or n_ctx_seq < 256 or n_ctx_seq % 256:
            raise ValueError(f"batch_n_ctx_seq: expected a multiple of 256, >= 256, got {n_ctx_seq!r}")
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = n_ctx_seq * n_seq_max
        p.n_batch = n_batch
        p.n_ubatch = n_batch
        p.n_seq_max = n_seq_max
        p.n_threads = n_threads
        p.n_threads_batch = n_threads
        p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        p.kv_unified = False
        p.no_perf = True
        self._model = llama._model.model
        self._vocab = llama._model.vocab
        ctx = llama_cpp.llama_init_from_model(self._model, p)
        if not ctx:
            raise RuntimeError(
                f"llama.cpp could not create a batch context ({n_seq_max} streams of {n_ctx_seq} cells)")
        self._ctx = ctx
        self._batch = None
        if lora_adapter is not None:
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(lora_adapter)
            scales = (ctypes.c_float * 1)(float(getattr(llama, "lora_scale", 1.0)))
            if llama_cpp.llama_set_adapters_lora(ctx, adapters, 1, scales):
                self.close()
                raise RuntimeError("llama.cpp could not apply the LoRA adapter to the batch context")
        self._mem = llama_cpp.llama_get_memory(ctx)
        self.n_seq_max = int(llama_cpp.llama_n_seq_max(ctx))
        self.n_ctx_seq = min(int(llama_cpp.llama_n_ctx(ctx)) // self.n_seq_max, n_ctx_seq)
        self.n_batch = n_batch
        self.n_vocab = int(llama.n_vocab())
        self._batch = llama_cpp.llama_batch_init(max(n_batch, self.n_seq_max), 0, 1)
        self._slots: dict[int, _Slot] = {}
        self._clock = 0
        self.decode_calls = 0
        """llama_decode calls made (for tests and benchmarks)."""

    # ------------------------------------------------------------ facts
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one cached token takes (all layers, f16 cells), from the model's shapes."""
        lib = self._lib
        layers = int(lib.llama_model_n_layer(self._model))
        head_kv = int(lib.llama_model_n_head_kv(self._model))
        head = int(lib.llama_model_n_head(self._model))
        embd = int(lib.llama_model_n_embd(self._model))
        return layers * 2 * head_kv * (embd // head) * 2

    def state_bytes(self, seq_id: int) -> int:
        """llama.cpp's own size of one sequence's saved state (its KV cells plus a header)."""
        return int(self._lib.llama_state_seq_get_size(self._ctx, seq_id))

    @property
    def slots(self) -> dict[int, list[int]]:
        """Cached sequences: seq id -> tokens."""
        return {k: list(v.tokens) for k, v in self._slots.items()}

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            if self._batch is not None:
                self._lib.llama_batch_free(self._batch)
                self._batch = None
            self._lib.llama_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def reset(self) -> None:
        """Drop every cached sequence."""
        self._lib.llama_memory_clear(self._mem, True)
        self._slots.clear()

    # ------------------------------------------------------------ streams
    def _assign(self, prompts: list[list[int]], classes: list[np.ndarray]) -> tuple[list[int], list[int]]:
        """A stream for each prompt (the cached one it can reuse most of, else a free or the
        least recently used one) and the prefix it keeps. The stream is truncated to it."""
        lib = self._lib
        n = len(prompts)
        best = []
        for i, (t, c) in enumerate(zip(prompts, classes)):
            for sid, s in self._slots.items():
                k = usable_prefix(s.tokens, s.classes, t, c, self.n_batch)
                if k > 0:
                    best.append((k, i, sid))
        best.sort(reverse=True)
        sid_of: list[int | None] = [None] * n
        keep = [0] * n
        taken: set[int] = set()
        for k, i, sid in best:
            if sid_of[i] is None and sid not in taken:
                sid_of[i], keep[i] = sid, k
                taken.add(sid)
        free = [s for s in range(self.n_seq_max) if s not in self._slots]
        lru = sorted((s.last_use, sid) for sid, s in self._slots.items() if sid not in taken)
        spare = free + [sid for _, sid in lru]
        for i in range(n):
            if sid_of[i] is None:
                sid_of[i] = spare.pop(0)
        ids = [int(s) for s in sid_of]  # type: ignore[arg-type]
        for i, sid in enumerate(ids):
            lib.llama_memory_seq_rm(self._mem, sid, keep[i], -1)
            self._slots.pop(sid, None)
        return ids, keep

    # ------------------------------------------------------------ decoding
    def _decode_call(self, chunk: list[tuple[int, int, int, bool]]) -> list[np.ndarray]:
        lib, b = self._lib, self._batch
        b.n_tokens = len(chunk)
        outs = 0
        for k, (tok, pos, sid, want) in enumerate(chunk):
            b.token[k] = tok
            b.pos[k] = pos
            b.n_seq_id[k] = 1
            b.seq_id[k][0] = sid
            b.logits[k] = 1 if want else 0
            outs += bool(want)
        rc = lib.llama_decode(self._ctx, b)
        self.decode_calls += 1
        if rc != 0:
            raise RuntimeError(f"llama_decode failed (code {rc}) on a batch of {len(chunk)} tokens")
        if not outs:
            return []
        arr = np.ctypeslib.as_array(lib.llama_get_logits(self._ctx), shape=(outs * self.n_vocab,))
        return list(arr.reshape(outs, self.n_vocab).copy())

    def _steps(self, items: list[tuple[int, int, int]]) -> list[np.ndarray]:
        """One row (token, position, seq id) for each of several sequences, at most ``DECODE_ROWS``
        per call (the single-row class); returns the logits of every row, in order."""
        out: list[np.ndarray] = []
        for off in range(0, len(items), DECODE_ROWS):
            out.extend(self._decode_call([(t, p, s, True) for t, p, s in items[off: off + DECODE_ROWS]]))
        return out

    def _prefill(self, tokens: list[int], start: int, stop: int, sid: int, want_last: bool) -> np.ndarray | None:
        """Evaluate ``tokens[start:stop]`` in ``sid`` cut at the reference chunk boundaries (each
        piece in one ``llama_decode``, so it has its reference chunk's class); returns the logits
        after ``tokens[stop - 1]`` if asked."""
        row = None
        p = start
        while p < stop:
            end = min(stop, (p // self.n_batch + 1) * self.n_batch)
            got = self._decode_call([(tokens[q], q, sid, want_last and q == stop - 1) for q in range(p, end)])
            if got:
                row = got[-1]
            p = end
        return row

    # ------------------------------------------------------------ samplers
    def _sampler(self, temperature: float, top_p: float, seed: int) -> Any:
        lib = self._lib
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        if temperature == 0.0:
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_greedy())
        else:
            # the chain Llama.generate builds for top_k=0, typical_p=1, min_p=0
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(0))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_typical(1.0, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_p(top_p, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_min_p(0.0, 1))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_temp(temperature))
            lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_dist(seed))
        return chain

    def _sample_row(self, smpl: Any, row: np.ndarray, greedy: bool) -> int:
        if greedy:
            return int(np.argmax(row))  # the first maximum, as llama.cpp's greedy sampler
        lib = self._lib
        data = (lib.llama_token_data * self.n_vocab)()
        view = np.ctypeslib.as_array(data).view(np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
        view["id"] = np.arange(self.n_vocab, dtype=np.int32)
        view["logit"] = row
        view["p"] = 0.0
        arr = lib.llama_token_data_array(data=data, size=self.n_vocab, selected=-1, sorted=False)
        lib.llama_sampler_apply(smpl, ctypes.byref(arr))
        tok = int(data[arr.selected].id)
        lib.llama_sampler_accept(smpl, tok)
        return tok

    def _is_eog(self, tok: int) -> bool:
        return bool(self._lib.llama_vocab_is_eog(self._vocab, tok))

    # ------------------------------------------------------------ public
    def _check(self, prompts: Sequence[Sequence[int]], what: str, extra: int) -> None:
        if not prompts:
            raise ValueError("prompts: expected at least one prompt, got an empty list")
        if len(prompts) > self.n_seq_max:
            raise ValueError(
                f"prompts: {len(prompts)} {what} exceed the batch context's {self.n_seq_max} sequences; "
                "split the call or open the backend with a larger batch_n_seq_max"
            )
        for i, t in enumerate(prompts):
            if len(t) == 0:
                raise ValueError(f"prompts[{i}]: tokenizes to no tokens")
            if len(t) + extra > self.n_ctx_seq:
                raise ValueError(
                    f"prompts[{i}]: {len(t)} tokens (+{extra}) do not fit a sequence of the batch context "
                    f"(batch_n_ctx_seq={self.n_ctx_seq}); shorten the prompt or open the backend with a "
                    "larger batch_n_ctx_seq"
                )

    def generate(self, requests: list[SeqRequest]) -> list[SeqSample]:
        """Generate every request's continuation together; one ``SeqSample`` per request, in order.

        Raises ValueError before any work for an empty list, more requests than
        sequences, or a prompt that leaves no room in its sequence.
        """
        self._check([r.tokens for r in requests], "sequences", 1)
        t0 = time.perf_counter()
        self._clock += 1
        uniq: dict[tuple[int, ...], int] = {}
        group = [uniq.setdefault(tuple(r.tokens), len(uniq)) for r in requests]
        prompts = [list(k) for k in uniq]
        classes = [ref_classes(len(t), self.n_batch) for t in prompts]
        uid, keep = self._assign(prompts, classes)
        # duplicates (n samples of one prompt) get streams of their own, copied after the prefill
        used = set(uid)
        spare = [s for s in range(self.n_seq_max) if s not in used and s not in self._slots]
        spare += [sid for _, sid in sorted((s.last_use, sid) for sid, s in self._slots.items() if sid not in used)]
        first: dict[int, int] = {}
        ids: list[int] = []
        for k, u in enumerate(group):
            if u not in first:
                first[u] = k
                ids.append(uid[u])
            else:
                sid = spare.pop(0)
                self._slots.pop(sid, None)
                ids.append(sid)
        last = [self._prefill(t, keep[u], len(t), uid[u], True) for u, t in enumerate(prompts)]
        for k, u in enumerate(group):
            if first[u] != k:
                self._lib.llama_memory_seq_rm(self._mem, ids[k], -1, -1)
                self._lib.llama_memory_seq_cp(self._mem, uid[u], ids[k], -1, -1)  # a whole-stream copy
        t_prefill = time.perf_counter()
        n = len(requests)
        limits = [min(r.max_tokens, self.n_ctx_seq - len(r.tokens)) for r in requests]
        out_toks: list[list[int]] = [[] for _ in range(n)]
        bufs = [b""] * n
        texts: list[str | None] = [None] * n
        cuts: list[int | None] = [None] * n
        lps: list[list[float]] = [[] for _ in range(n)]
        ends: list[list[int]] = [[] for _ in range(n)]
        finish = ["length"] * n
        t_end = [t_prefill] * n
        rows: dict[int, np.ndarray] = {k: last[group[k]] for k in range(n)}  # type: ignore[misc]
        pos = [len(r.tokens) for r in requests]
        samplers = [self._sampler(r.temperature, r.top_p, r.seed) for r in requests]
        try:
            active = list(range(n))
            while active:
                feed: list[int] = []
                for k in active:
                    r = requests[k]
                    tok = self._sample_row(samplers[k], rows[k], r.temperature == 0.0)
                    done = False
                    if self._is_eog(tok):
                        finish[k], done = "stop", True
                    else:
                        out_toks[k].append(tok)
                        bufs[k] += self.llama.detokenize([tok])
                        if r.logprobs:
                            lps[k].append(float(rows[k][tok]) - _logsumexp(rows[k]))
                            ends[k].append(len(bufs[k].decode("utf-8", errors="ignore")))
                        if r.stop:
                            decoded = bufs[k].decode("utf-8", errors="ignore")
                            cut = find_stop(decoded, r.stop)
                            if cut >= 0:
                                texts[k], finish[k], done = decoded[:cut], "stop", True
                                cuts[k] = cut
                        if not done and len(out_toks[k]) >= limits[k]:
                            done = True
                    if done:
                        t_end[k] = time.perf_counter()
                    else:
                        feed.append(k)
                if not feed:
                    break
                got = self._steps([(out_toks[k][-1], pos[k], ids[k]) for k in feed])
                for j, k in enumerate(feed):
                    rows[k] = got[j]
                    pos[k] += 1
                active = feed
        finally:
            for smpl in samplers:
                self._lib.llama_sampler_free(smpl)
        for k, r in enumerate(requests):  # each stream keeps its prompt and the decoded tokens
            toks = list(r.tokens) + out_toks[k][: pos[k] - len(r.tokens)]
            cls = np.concatenate([classes[group[k]], np.zeros(len(toks) - len(r.tokens), dtype=bool)])
            self._slots[ids[k]] = _Slot(toks, cls, self._clock)
        out = []
        for k, r in enumerate(requests):
            text = texts[k] if texts[k] is not None else bufs[k].decode("utf-8", errors="ignore")
            out.append(SeqSample(
                text=text, tokens=out_toks[k], finish_reason=finish[k], seconds=t_end[k] - t0,
                prefill_seconds=t_prefill - t0, decode_seconds=t_end[k] - t_prefill, cached_tokens=keep[group[k]],
                **(dict(zip(("token_logprobs", "token_ends"), text_logprobs(lps[k], ends[k], cuts[k])))
                   if r.logprobs else {}),
            ))
        return out

    def score(self, prompts: list[list[int]], options: list[list[list[int]]]) -> tuple[list[list[float]], float, list[int]]:
        """Total log-likelihood of each option (token list) after its prompt, for many prompts at once.

        Each prompt is evaluated in its own stream (reusing its cached prefix) and stays
        cached. An option's first token is scored from the logits after the prompt's
        last token; the later ones by decoding ``option[:-1]`` after the prompt (the
        options of all prompts side by side), then dropping them again.
        Returns (logprobs per prompt, prefill seconds, cached tokens per prompt).
        """
        if len(prompts) != len(options):
            raise ValueError(f"options: expected one option list per prompt ({len(prompts)}), got {len(options)}")
        longest = max((len(o) for opts in options for o in opts), default=1)
        if longest >= GEMM_ROWS - 1:
            raise ValueError(f"options: an option of {longest} tokens; batched scoring takes at most "
                             f"{GEMM_ROWS - 2} tokens per option (use choose() for longer ones)")
        self._check(prompts, "prompts", longest)
        self._clock += 1
        t0 = time.perf_counter()
        uniq: dict[tuple[int, ...], int] = {}
        group = [uniq.setdefault(tuple(p), len(uniq)) for p in prompts]
        uprompts = [list(k) for k in uniq]
        classes = [score_classes(len(t), self.n_batch) for t in uprompts]
        ids, keep = self._assign(uprompts, classes)
        # all but the last token in chunks, then every prompt's last token in one step (single rows)
        for u, t in enumerate(uprompts):
            self._prefill(t, keep[u], len(t) - 1, ids[u], False)
        last = self._steps([(t[-1], len(t) - 1, ids[u]) for u, t in enumerate(uprompts)])
        for u, t in enumerate(uprompts):
            self._slots[ids[u]] = _Slot(list(t), classes[u], self._clock)
        prefill = time.perf_counter() - t0
        lse = [_logsumexp(r) for r in last]
        result: list[list[float]] = []
        for i, opts in enumerate(options):
            u = group[i]
            # the same arithmetic and order as llama_session.score: 0.0 + first term + later terms
            result.append([0.0 + (float(last[u][o[0]]) - lse[u]) for o in opts])
        # options beyond their first token: the internal nodes of each prompt's option trie are
        # decoded once each (shared option prefixes, e.g. " 1" and " 10", once), depth first, one
        # node of every prompt per step; a node's logits score the next token of every option
        # through it
        terms: list[list[list[tuple[int, float]]]] = [[[] for _ in opts] for opts in options]
        walks: dict[int, list[tuple[int, ...]]] = {}
        for u in range(len(uprompts)):
            nodes = {tuple(o[:k]) for i, opts in enumerate(options) if group[i] == u
                     for o in opts for k in range(1, len(o))}
            if nodes:
                walks[u] = sorted(nodes)  # lexicographic = depth first, parents before children
        step = 0
        while walks:
            items, who = [], []
            for u, nodes in walks.items():
                q = nodes[step] if step < len(nodes) else None
                if q is None:
                    continue
                base = len(uprompts[u])
                self._lib.llama_memory_seq_rm(self._mem, ids[u], base + len(q) - 1, -1)
                items.append((q[-1], base + len(q) - 1, ids[u]))
                who.append((u, q))
            if not items:
                break
            for (u, q), row in zip(who, self._steps(items)):
                lse_q = None
                d = len(q)
                for i, opts in enumerate(options):
                    if group[i] != u:
                        continue
                    for j, o in enumerate(opts):
                        if len(o) > d and tuple(o[:d]) == q:
                            lse_q = _logsumexp(row) if lse_q is None else lse_q
                            terms[i][j].append((d, float(row[o[d]]) - lse_q))
            step += 1
        for i, opts in enumerate(options):
            for j in range(len(opts)):
                total = result[i][j]
                for _, t in sorted(terms[i][j]):
                    total += t
                result[i][j] = total
        for u in walks:
            self._lib.llama_memory_seq_rm(self._mem, ids[u], len(uprompts[u]), -1)
        cached = [keep[group[i]] for i in range(len(prompts))]
        return result, prefill, cached
