"""Many sequences in one llama.cpp decode: batched generation and option scoring.

All use of llama-cpp-python's low-level batch API (a second ``llama_context`` on
the loaded model, ``llama_batch`` with a sequence id per token, ``llama_memory_seq_*``,
per-sequence ``llama_sampler`` chains) lives in this module.

The KV cache is one unified buffer of ``n_ctx`` cells shared by all sequences.
Sequences that share a prefix share its cells (``llama_memory_seq_cp`` adds a
sequence id to a cell, it copies nothing). After a call every sequence stays in
the cache as a *slot* (its tokens are known), so the next call's prompts reuse
the longest cached prefix: a town agent's prompt of step t+1 starts from its
prompt of step t. Slots are evicted least-recently-used when cells or sequence
ids run out.

Exactness (measured on this llama.cpp CPU build, see docs/llm.md): with flash
attention each query reads only its own sequence's cells (masked cells are
skipped, not summed as zeros), and every row of a ``llama_decode`` is computed on
its own, with one exception: a ubatch of ``GEMM_ROWS`` (64) or more tokens takes
another kernel than a smaller one, and the two differ by far more than rounding.
So every row here is computed in a ubatch of the same *class* (small or large)
as a cold single-sequence evaluation would use: ``Llama.eval`` feeds the prompt
in chunks of ``n_batch`` tokens, so a prompt position is "large" when its chunk
has 64 or more tokens; decode steps are "small" (one token), so at most 63
sequences share one decode call. Prefix reuse is allowed only where the cached
rows have the class the new prompt needs; a large ubatch short of 64 rows is
padded with a scratch sequence. The sampler chain per sequence is the one
``Llama.generate`` builds (top-k off, typical 1, top-p, min-p 0, temperature,
``dist(seed)``; greedy at temperature 0), seeded per sequence.
"""
from __future__ import annotations

import ctypes
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from metacog_fast.llm.params import find_stop

GEMM_ROWS = 64
"""Ubatches of at least this many tokens take llama.cpp's other CPU kernel (measured: logits
of the same token differ by ~0.7 between a 63- and a 64-token ubatch, and not at all within a class)."""


KV_TILE = 64
"""Large ubatches read the KV cells in tiles of this many cells: a large row's result depends on
where its sequence's cells sit modulo 64 (measured: exact at offsets 64, 128, 256, 512; not at 16
or 32), so large rows are placed at cells congruent to their positions."""


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
    """Most tokens to generate (cut to the room left in the context)."""
    temperature: float
    """0 = greedy."""
    top_p: float
    """Nucleus mass in (0, 1]."""
    seed: int
    """Seed of this sequence's sampler."""
    stop: tuple[str, ...] = ()
    """Stop strings; the text ends before the first one."""


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


@dataclass
class _Slot:
    tokens: list[int]
    """Tokens whose keys/values this sequence holds, positions 0..len-1."""
    cells: list[int]
    """Virtual cell id of each token (shared ids = shared KV cells)."""
    classes: np.ndarray
    """[len(tokens)] bool: row computed in a large ubatch (see ``GEMM_ROWS``)."""
    last_use: int


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x = np.asarray(a[:n], dtype=np.int64)
    y = np.asarray(b[:n], dtype=np.int64)
    diff = np.nonzero(x != y)[0]
    return int(diff[0]) if diff.size else n


def _same_rows(a: Sequence[int], ca: np.ndarray, b: Sequence[int], cb: np.ndarray, cap: int) -> int:
    """Leading positions where both the tokens and the row classes agree (at most ``cap``)."""
    n = min(_lcp(a, b), cap)
    if n == 0:
        return 0
    diff = np.nonzero(ca[:n] != cb[:n])[0]
    n = int(diff[0]) if diff.size else n
    if n < len(cb) and cb[n]:
        # the first new row is large: it must start a fresh KV tile of its own sequence
        n -= n % KV_TILE
    return n


def _logsumexp(row: np.ndarray) -> float:
    # the same arithmetic as llama_session.score, so batched and single scores agree bit for bit
    r = row.astype(np.float64)
    m = float(r.max())
    return m + float(np.log(np.exp(r - m).sum()))


class _Plan:
    """Where each unique prompt of a call gets its cached prefix from."""

    def __init__(self, prompts: list[list[int]], classes: list[np.ndarray], slots: dict[int, _Slot]) -> None:
        self.donor: list[tuple[str, int, int]] = []  # (kind "slot"|"root_dep"|"none", source, shared length)
        for i, toks in enumerate(prompts):
            cap = len(toks) - 1  # the last prompt token is always decoded: its logits are needed
            best: tuple[str, int, int] = ("none", -1, 0)
            for sid, s in slots.items():
                n = _same_rows(s.tokens, s.classes, toks, classes[i], cap)
                if n > best[2]:
                    best = ("slot", sid, n)
            for j in range(i):
                if self.donor[j][0] != "root_dep":
                    n = _same_rows(prompts[j], classes[j], toks, classes[i], cap)
                    if n > best[2]:
                        best = ("root", j, n)
            self.donor.append(best if best[0] != "root" else ("root_dep", best[1], best[2]))
        self.new_cells = sum(len(t) - d[2] for t, d in zip(prompts, self.donor))

    def slot_donors(self) -> set[int]:
        return {d[1] for d in self.donor if d[0] == "slot"}


class LlamaBatchEngine:
    """Batched decoding of many sequences on the model of one ``llama_cpp.Llama`` (not thread-safe).

    ``n_ctx``: KV cells shared by all sequences; ``n_seq_max``: most sequences held at
    once (cached slots included; one more id is the padding scratch sequence);
    ``n_batch``: most tokens per ``llama_decode``, and the chunk size of the
    single-sequence path whose row classes are reproduced (``Llama``'s ``n_batch``).
    """

    def __init__(self, llama: Any, *, n_ctx: int, n_seq_max: int, n_batch: int, n_threads: int,
                 lora_adapter: Any = None) -> None:
        import llama_cpp

        self._lib = llama_cpp
        self.llama = llama
        cap = int(llama_cpp.llama_max_parallel_sequences()) - 2
        if isinstance(n_seq_max, bool) or not isinstance(n_seq_max, int) or not 1 <= n_seq_max <= cap:
            raise ValueError(f"batch_n_seq_max: expected an int in [1, {cap}], got {n_seq_max!r}")
        if isinstance(n_batch, bool) or not isinstance(n_batch, int) or n_batch < GEMM_ROWS:
            raise ValueError(f"n_batch: expected an int >= {GEMM_ROWS} for batched decoding, got {n_batch!r}")
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 256:
            raise ValueError(f"batch_n_ctx: expected an int >= 256, got {n_ctx!r}")
        n_seq_max += 2  # the graveyard and the padding scratch sequence
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = n_batch
        p.n_ubatch = n_batch
        p.n_seq_max = n_seq_max
        p.n_threads = n_threads
        p.n_threads_batch = n_threads
        p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
        p.kv_unified = True
        p.no_perf = True
        self._model = llama._model.model
        self._vocab = llama._model.vocab
        ctx = llama_cpp.llama_init_from_model(self._model, p)
        if not ctx:
            raise RuntimeError(f"llama.cpp could not create a batch context (n_ctx={n_ctx}, n_seq_max={n_seq_max})")
        self._ctx = ctx
        if lora_adapter is not None:
            adapters = (llama_cpp.llama_adapter_lora_p_ctypes * 1)(lora_adapter)
            scales = (ctypes.c_float * 1)(float(getattr(llama, "lora_scale", 1.0)))
            if llama_cpp.llama_set_adapters_lora(ctx, adapters, 1, scales):
                self.close()
                raise RuntimeError("llama.cpp could not apply the LoRA adapter to the batch context")
        self._mem = llama_cpp.llama_get_memory(ctx)
        self.n_ctx = int(llama_cpp.llama_n_ctx(ctx))
        self.n_seq_max = int(llama_cpp.llama_n_seq_max(ctx))
        self.n_ids = self.n_seq_max - 2
        """Sequence ids for prompts and slots (the last two: graveyard and padding scratch)."""
        self.graveyard_id = self.n_seq_max - 2
        self.scratch_id = self.n_seq_max - 1
        bos = int(llama.token_bos())
        self._pad_token = bos if bos >= 0 else 0
        self.n_batch = n_batch
        self.n_vocab = int(llama.n_vocab())
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._slots: dict[int, _Slot] = {}
        self._refs: Counter[int] = Counter()
        self._next_cell = 0
        self._clock = 0
        self._top = 0
        self.epochs = 0
        """Times the arena was cleared because a call did not fit behind the cells in use."""
        self.decode_calls = 0
        """llama_decode calls made (for tests and benchmarks)."""

    # ------------------------------------------------------------ facts
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one cached token takes (all layers), from the model's shapes and f16 cells."""
        lib = self._lib
        layers = int(lib.llama_model_n_layer(self._model))
        head_kv = int(lib.llama_model_n_head_kv(self._model))
        head = int(lib.llama_model_n_head(self._model))
        embd = int(lib.llama_model_n_embd(self._model))
        return layers * 2 * head_kv * (embd // head) * 2

    def state_bytes(self, seq_id: int) -> int:
        """llama.cpp's own size of one sequence's saved state (KV cells plus header)."""
        return int(self._lib.llama_state_seq_get_size(self._ctx, seq_id))

    @property
    def used_cells(self) -> int:
        """KV cells taken in the current arena epoch (live and buried; see :meth:`_bury`)."""
        return self._top

    @property
    def live_cells(self) -> int:
        """KV cells held by cached sequences (shared cells counted once)."""
        return len(self._refs)

    @property
    def slots(self) -> dict[int, list[int]]:
        """Cached sequences: seq id -> tokens."""
        return {k: list(v.tokens) for k, v in self._slots.items()}

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            if getattr(self, "_batch", None) is not None:
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
        """Drop every cached sequence and start a new arena epoch."""
        self._lib.llama_memory_clear(self._mem, True)
        self._slots.clear()
        self._refs.clear()
        self._top = 0
        self.epochs += 1

    # ------------------------------------------------------------ cells and slots
    # The KV buffer is used as an arena: llama.cpp places new tokens in the first free cells
    # from its head pointer, and freeing cells (seq_rm) moves the head back into the hole, so a
    # sequence could get a later position in a lower cell; flash attention sums cells in index
    # order, so its result would change in the last bits. Cells are therefore never freed one
    # by one: a dead sequence's cells are handed to the graveyard sequence (still occupied,
    # masked for everyone) and the whole buffer is cleared when the arena is full.
    def _new_cells(self, n: int) -> list[int]:
        out = list(range(self._next_cell, self._next_cell + n))
        self._next_cell += n
        return out

    def _hold(self, cells: list[int]) -> None:
        self._refs.update(cells)

    def _bury_seq(self, sid: int) -> None:
        self._lib.llama_memory_seq_cp(self._mem, sid, self.graveyard_id, -1, -1)
        self._lib.llama_memory_seq_rm(self._mem, sid, -1, -1)

    def _bury(self, sid: int) -> None:
        s = self._slots.pop(sid)
        self._bury_seq(sid)
        self._refs.subtract(s.cells)
        for c in s.cells:
            if self._refs[c] <= 0:
                del self._refs[c]

    def _free_ids(self, k: int, keep: set[int]) -> list[int]:
        """``k`` unused sequence ids, burying least-recently-used slots not in ``keep``."""
        free = [i for i in range(self.n_ids) if i not in self._slots]
        while len(free) < k:
            victims = sorted((s.last_use, sid) for sid, s in self._slots.items() if sid not in keep)
            if not victims:  # pragma: no cover - guarded by the callers' checks
                raise RuntimeError("no sequence id can be freed")
            self._bury(victims[0][1])
            free.append(victims[0][1])
        return sorted(free)[:k]

    def _make_room(self, prompts: list[list[int]], classes: list[np.ndarray], extra_cells: int,
                   extra_ids: int) -> _Plan:
        """The prefix plan of a call, after starting a new arena epoch if the call does not fit."""
        plan = _Plan(prompts, classes, self._slots)
        if self._top + plan.new_cells + extra_cells + 2 * GEMM_ROWS > self.n_ctx:
            self.reset()
            plan = _Plan(prompts, classes, self._slots)
        return plan

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
        self._top += len(chunk)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed (code {rc}) on a batch of {len(chunk)} tokens")
        if not outs:
            return []
        arr = np.ctypeslib.as_array(lib.llama_get_logits(self._ctx), shape=(outs * self.n_vocab,))
        return list(arr.reshape(outs, self.n_vocab).copy())

    def _decode(self, items: list[tuple[int, int, int, bool, bool]]) -> dict[int, np.ndarray]:
        """Decode (token, position, seq id, want logits, large) rows; returns {item index: logits [V]}.

        Large rows (see the module notes) go in ubatches of ``GEMM_ROWS``..``n_batch`` tokens,
        each sequence's run starting at a cell congruent to its position modulo ``KV_TILE``
        (scratch rows pad the gaps and a short last ubatch); small rows go in ubatches of at
        most ``GEMM_ROWS - 1`` tokens. Large rows are decoded first: within a sequence they
        always precede its small rows."""
        rows: dict[int, np.ndarray] = {}
        large = [i for i, it in enumerate(items) if it[4]]
        small = [i for i, it in enumerate(items) if not it[4]]
        chunk: list[tuple[int, int, int, bool]] = []
        owners: list[int] = []
        scratch_pos = 0

        def flush(pad_to: int) -> None:
            nonlocal chunk, owners, scratch_pos
            if not chunk:
                return
            while len(chunk) < pad_to:
                chunk.append((self._pad_token, scratch_pos, self.scratch_id, False))
                owners.append(-1)
                scratch_pos += 1
            got = self._decode_call(chunk)
            for i, r in zip([o for o, c in zip(owners, chunk) if c[3]], got):
                rows[i] = r
            if scratch_pos:
                self._bury_seq(self.scratch_id)
            chunk, owners, scratch_pos = [], [], 0

        prev: tuple[int, int] | None = None  # (seq id, position) of the last large row placed
        for i in large:
            tok, pos, sid, want, _ = items[i]
            contiguous = prev == (sid, pos - 1)
            if not contiguous:
                gap = (pos - (self._top + len(chunk))) % KV_TILE
                if len(chunk) + gap + 1 > self.n_batch:
                    flush(GEMM_ROWS)
                    gap = (pos - self._top) % KV_TILE
                for _ in range(gap):
                    chunk.append((self._pad_token, scratch_pos, self.scratch_id, False))
                    owners.append(-1)
                    scratch_pos += 1
            elif len(chunk) + 1 > self.n_batch:
                flush(GEMM_ROWS)
            chunk.append((tok, pos, sid, want))
            owners.append(i)
            prev = (sid, pos)
        flush(GEMM_ROWS)
        for off in range(0, len(small), GEMM_ROWS - 1):
            part = small[off: off + GEMM_ROWS - 1]
            got = self._decode_call([items[i][:4] for i in part])
            for i, r in zip([i for i in part if items[i][3]], got):
                rows[i] = r
        return rows

    def _prefill(self, prompts: list[list[int]], classes: list[np.ndarray], plan: _Plan,
                 ids: list[int]) -> tuple[list[np.ndarray], list[list[int]]]:
        """Fill sequence ``ids[i]`` with ``prompts[i]`` reusing the plan's prefixes; returns the
        logits row after each prompt's last token and each sequence's cell ids."""
        lib = self._lib
        cells: list[list[int]] = [[] for _ in prompts]
        last: list[np.ndarray] = [np.empty(0)] * len(prompts)
        # 1. prefixes from cached slots (before any slot is modified)
        for i, (kind, src, n) in enumerate(plan.donor):
            if kind == "slot" and n > 0:
                lib.llama_memory_seq_cp(self._mem, src, ids[i], 0, n)
                cells[i] = self._slots[src].cells[:n]
        # 2. roots (cache donor or none), then 3. prompts sharing a root's prefix
        for phase in ("first", "dependent"):
            items: list[tuple[int, int, int, bool, bool]] = []
            owner: list[int] = []
            for i, (kind, src, n) in enumerate(plan.donor):
                if (kind == "root_dep") != (phase == "dependent"):
                    continue
                if kind == "root_dep" and n > 0:
                    lib.llama_memory_seq_cp(self._mem, ids[src], ids[i], 0, n)
                    cells[i] = cells[src][:n]
                toks = prompts[i]
                for p in range(n, len(toks)):
                    items.append((toks[p], p, ids[i], p == len(toks) - 1, bool(classes[i][p])))
                    owner.append(i)
                cells[i] = cells[i] + self._new_cells(len(toks) - n)
            for k, row in self._decode(items).items():
                last[owner[k]] = row
        return last, cells

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
            return int(np.argmax(row))  # first maximum, as llama.cpp's greedy sampler
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
    def generate(self, requests: list[SeqRequest]) -> list[SeqSample]:
        """Generate every request's continuation together; one ``SeqSample`` per request, in order.

        Raises ValueError before any work when a prompt does not fit the context, when
        there are more sequences than ids, or when all of them together (prompts plus
        ``max_tokens`` each) could not fit an empty cache.
        """
        if not requests:
            raise ValueError("prompts: expected at least one prompt, got an empty list")
        if len(requests) > self.n_ids:
            raise ValueError(
                f"prompts: {len(requests)} sequences exceed the batch context's {self.n_ids} sequence ids; "
                "split the call or open the backend with a larger batch_n_seq_max"
            )
        for i, r in enumerate(requests):
            if not r.tokens:
                raise ValueError(f"prompts[{i}]: tokenizes to no tokens")
            if len(r.tokens) + 1 > self.n_ctx:
                raise ValueError(
                    f"prompts[{i}]: {len(r.tokens)} tokens do not fit the batch context n_ctx={self.n_ctx}; "
                    "shorten the prompt or open the backend with a larger batch_n_ctx"
                )
        t0 = time.perf_counter()
        self._clock += 1
        # identical prompts (n samples of one prompt) are prefilled once
        uniq: dict[tuple[int, ...], int] = {}
        group = [uniq.setdefault(tuple(r.tokens), len(uniq)) for r in requests]
        prompts = [list(k) for k in uniq]
        classes = [ref_classes(len(t), self.n_batch) for t in prompts]
        limits = [min(r.max_tokens, self.n_ctx - len(r.tokens)) for r in requests]
        gen_cells = sum(limits)
        cold = _Plan(prompts, classes, {})
        if cold.new_cells + gen_cells + GEMM_ROWS > self.n_ctx:
            raise ValueError(
                f"prompts: {len(requests)} sequences need up to {cold.new_cells + gen_cells} KV cells "
                f"({cold.new_cells} prompt + {gen_cells} generated) but the batch context holds "
                f"n_ctx={self.n_ctx} (less {GEMM_ROWS} for padding); lower max_tokens, split the call "
                "or open the backend with a larger batch_n_ctx"
            )
        plan = self._make_room(prompts, classes, gen_cells, len(requests))
        ids = self._free_ids(len(requests), keep=plan.slot_donors())
        root_of: dict[int, int] = {}
        for k, u in enumerate(group):
            root_of.setdefault(u, k)
        uid = [ids[root_of[u]] for u in range(len(prompts))]
        last, ucells = self._prefill(prompts, classes, plan, uid)
        for sid in plan.slot_donors():  # superseded by the sequences that took their prefix
            if sid in self._slots and sid not in ids:
                self._bury(sid)
        seq_cells: list[list[int]] = []
        for k, u in enumerate(group):
            if root_of[u] != k:  # duplicates share the whole prompt and its last logits row
                self._lib.llama_memory_seq_cp(self._mem, uid[u], ids[k], 0, len(prompts[u]))
            seq_cells.append(list(ucells[u]))
        t_prefill = time.perf_counter()
        n = len(requests)
        out_toks: list[list[int]] = [[] for _ in range(n)]
        bufs = [b""] * n
        texts: list[str | None] = [None] * n
        finish = ["length"] * n
        t_end = [t_prefill] * n
        rows: dict[int, np.ndarray] = {k: last[group[k]] for k in range(n)}
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
                        if r.stop:
                            decoded = bufs[k].decode("utf-8", errors="ignore")
                            cut = find_stop(decoded, r.stop)
                            if cut >= 0:
                                texts[k], finish[k], done = decoded[:cut], "stop", True
                        if not done and len(out_toks[k]) >= limits[k]:
                            done = True
                    if done:
                        t_end[k] = time.perf_counter()
                    else:
                        feed.append(k)
                if not feed:
                    break
                got = self._decode([(out_toks[k][-1], pos[k], ids[k], True, False) for k in feed])
                for j, k in enumerate(feed):
                    rows[k] = got[j]
                    pos[k] += 1
                    seq_cells[k].extend(self._new_cells(1))
                active = feed
        finally:
            for smpl in samplers:
                self._lib.llama_sampler_free(smpl)
        # every sequence stays cached: its prompt plus the generated tokens that were decoded
        for k, r in enumerate(requests):
            toks = list(r.tokens) + out_toks[k][: pos[k] - len(r.tokens)]
            cls = np.concatenate([classes[group[k]], np.zeros(len(toks) - len(r.tokens), dtype=bool)])
            self._slots[ids[k]] = _Slot(toks, seq_cells[k], cls, self._clock)
            self._hold(seq_cells[k])
        out = []
        for k, r in enumerate(requests):
            text = texts[k] if texts[k] is not None else bufs[k].decode("utf-8", errors="ignore")
            d = plan.donor[group[k]]
            out.append(SeqSample(
                text=text, tokens=out_toks[k], finish_reason=finish[k], seconds=t_end[k] - t0,
                prefill_seconds=t_prefill - t0, decode_seconds=t_end[k] - t_prefill,
                cached_tokens=d[2] if d[0] == "slot" else 0,
            ))
        return out

    def score(self, prompts: list[list[int]], options: list[list[list[int]]]) -> tuple[list[list[float]], float, list[int]]:
        """Total log-likelihood of each option (token list) after its prompt, for many prompts at once.

        Each prompt is prefilled (reusing cached prefixes) and stays cached. An option's
        first token is scored from the logits after the prompt's last token, later ones
        by decoding ``option[:-1]`` in a temporary sequence sharing the prompt's cells.
        Returns (logprobs per prompt, prefill seconds, cached tokens per prompt).
        """
        if not prompts:
            raise ValueError("prompts: expected at least one prompt, got an empty list")
        if len(prompts) != len(options):
            raise ValueError(f"options: expected one option list per prompt ({len(prompts)}), got {len(options)}")
        if len(prompts) >= self.n_ids:
            raise ValueError(
                f"prompts: {len(prompts)} prompts need {len(prompts) + 1} sequence ids, more than the batch "
                f"context's {self.n_ids}; split the call or open the backend with a larger batch_n_seq_max"
            )
        for i, (p, opts) in enumerate(zip(prompts, options)):
            if not p:
                raise ValueError(f"prompts[{i}]: tokenizes to no tokens")
            longest = max(len(o) for o in opts)
            if len(p) + longest > self.n_ctx:
                raise ValueError(
                    f"prompts[{i}]: prompt + longest option = {len(p) + longest} tokens do not fit the batch "
                    f"context n_ctx={self.n_ctx}"
                )
            if longest >= GEMM_ROWS - 1:
                raise ValueError(
                    f"options of prompts[{i}]: an option of {longest} tokens; batched scoring takes options "
                    f"of at most {GEMM_ROWS - 2} tokens (use choose() for longer ones)"
                )
        self._clock += 1
        t0 = time.perf_counter()
        uniq: dict[tuple[int, ...], int] = {}
        group = [uniq.setdefault(tuple(p), len(uniq)) for p in prompts]
        uprompts = [list(k) for k in uniq]
        classes = [score_classes(len(t), self.n_batch) for t in uprompts]
        opt_cells = max(len(o) - 1 for opts in options for o in opts)
        cold = _Plan(uprompts, classes, {})
        if cold.new_cells + opt_cells + GEMM_ROWS > self.n_ctx:
            raise ValueError(
                f"prompts: {len(prompts)} prompts need {cold.new_cells + opt_cells} KV cells, more than the batch "
                f"context holds (n_ctx={self.n_ctx} less {GEMM_ROWS} for padding); split the call or open the "
                "backend with a larger batch_n_ctx"
            )
        plan = self._make_room(uprompts, classes, opt_cells, len(uprompts) + 1)
        ids = self._free_ids(len(uprompts), keep=plan.slot_donors())
        last, ucells = self._prefill(uprompts, classes, plan, ids)
        for sid in plan.slot_donors():
            if sid in self._slots and sid not in ids:
                self._bury(sid)
        for u, toks in enumerate(uprompts):
            self._slots[ids[u]] = _Slot(list(toks), ucells[u], classes[u], self._clock)
            self._hold(ucells[u])
        prefill = time.perf_counter() - t0
        lse_last = [_logsumexp(r) for r in last]
        result: list[list[float]] = []
        todo: list[tuple[int, int]] = []  # options with tokens beyond the first
        for i, opts in enumerate(options):
            u = group[i]
            # the same arithmetic and order as llama_session.score: 0.0 + first term + later terms
            result.append([0.0 + (float(last[u][o[0]]) - lse_last[u]) for o in opts])
            todo.extend((i, j) for j, o in enumerate(opts) if len(o) > 1)
        keep = {ids[u] for u in range(len(uprompts))}
        while todo:
            free_ids = [s for s in range(self.n_ids) if s not in self._slots]
            if not free_ids:
                victims = sorted((s.last_use, sid) for sid, s in self._slots.items() if sid not in keep)
                self._bury(victims[0][1])  # exists: fewer prompts than ids was checked
                continue
            room = self.n_ctx - self._top - 2 * GEMM_ROWS
            wave: list[tuple[int, int]] = []
            used = 0
            while todo and len(wave) < len(free_ids):
                i, j = todo[0]
                need = len(options[i][j]) - 1
                if used + need > room:
                    break
                wave.append(todo.pop(0))
                used += need
            if not wave:
                raise RuntimeError(  # pragma: no cover - the capacity check above excludes it
                    f"option sequences do not fit the batch context (n_ctx={self.n_ctx}, {self._top} cells in use)")
            items: list[tuple[int, int, int, bool, bool]] = []
            spans = []
            for (i, j), sid in zip(wave, free_ids):
                u = group[i]
                base = len(uprompts[u])
                self._lib.llama_memory_seq_cp(self._mem, ids[u], sid, 0, base)
                start = len(items)
                for p, tok in enumerate(options[i][j][:-1]):
                    items.append((tok, base + p, sid, True, False))
                spans.append((i, j, start))
            rows = self._decode(items)
            for i, j, start in spans:
                total = result[i][j]
                for p, tok in enumerate(options[i][j][1:]):
                    r = rows[start + p]
                    total += float(r[tok]) - _logsumexp(r)
                result[i][j] = total
            for sid in free_ids[: len(wave)]:
                self._bury_seq(sid)
        cached = [plan.donor[group[i]][2] if plan.donor[group[i]][0] == "slot" else 0 for i in range(len(prompts))]
        return result, prefill, cached
