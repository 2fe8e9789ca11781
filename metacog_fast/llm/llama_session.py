"""Token-level generation and scoring on one ``llama_cpp.Llama`` with KV-cache prefix reuse.

All use of llama-cpp-python internals (``_ctx``, ``_batch``, ``input_ids``,
``n_tokens``) lives here. The bookkeeping invariant kept by every method is the
one ``Llama.generate`` relies on: ``input_ids[:n_tokens]`` are exactly the
tokens whose keys/values sit in the KV cache (sequence 0), so the next
``generate`` reuses the longest common prefix instead of evaluating again.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from metacog_fast.llm.params import find_stop


@dataclass(frozen=True)
class Sample:
    """One generated sequence at token level."""

    text: str
    tokens: list[int]
    finish_reason: str
    seconds: float
    prefill_seconds: float
    decode_seconds: float
    cached_tokens: int
    token_logprobs: tuple[float, ...] | None = None
    """With ``logprobs``: log-softmax of the raw logits at each token of ``text`` (see ``text_logprobs``)."""
    token_ends: tuple[int, ...] | None = None
    """With ``logprobs``: where each of those tokens ends in ``text`` (characters; the last may exceed it)."""


def text_logprobs(logprobs: Sequence[float], ends: Sequence[int], cut: int | None
                  ) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """(log-probabilities, end offsets) of the tokens that make up the returned text: those that start
    before ``cut`` (the stop string's offset in the decoded text; None: every token). ``ends[i]``:
    length of the decoded text after token ``i``."""
    keep = [i for i in range(len(logprobs)) if cut is None or (ends[i - 1] if i else 0) < cut]
    return tuple(logprobs[i] for i in keep), tuple(ends[i] for i in keep)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x = np.asarray(a[:n], dtype=np.int64)
    y = np.asarray(b[:n], dtype=np.int64)
    diff = np.nonzero(x != y)[0]
    return int(diff[0]) if diff.size else n


def _logsumexp(row: np.ndarray) -> float:
    r = row.astype(np.float64)
    m = float(r.max())
    return m + float(np.log(np.exp(r - m).sum()))


class LlamaSession:
    """Generation and option scoring on one model instance (not thread-safe)."""

    def __init__(self, llama: Any) -> None:
        import llama_cpp

        self.llama = llama
        self._lib = llama_cpp
        # llama.cpp may round the context up; the Python-side token buffer keeps the requested size.
        self.n_ctx = min(int(llama.n_ctx()), len(llama.input_ids))
        self.n_vocab = int(llama.n_vocab())
        self.n_batch = int(llama.n_batch)

    # -------------------------------------------------------------- tokens
    def tokenize(self, text: str, *, bos: bool, special: bool) -> list[int]:
        """``bos``: add BOS if the model's vocabulary asks for it (as llama-cpp-python does)."""
        return list(self.llama.tokenize(text.encode("utf-8"), add_bos=bos, special=special))

    def cached_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` are already in the KV cache."""
        ll = self.llama
        return common_prefix(ll.input_ids[: ll.n_tokens], tokens)

    def _is_eog(self, token: int) -> bool:
        return bool(self._lib.llama_vocab_is_eog(self.llama._model.vocab, token))

    # -------------------------------------------------------------- generation
    def sample(
        self,
        prompt_tokens: list[int],
        *,
        temperature: float,
        top_p: float,
        seed: int,
        max_tokens: int,
        stop: tuple[str, ...] = (),
        grammar: Any = None,
        logprobs: bool = False,
    ) -> Sample:
        """Generate one continuation of ``prompt_tokens``.

        Plain temperature/top-p sampling: top-k, min-p, typical-p and the repeat
        penalty are disabled so that the distribution is the model's own.
        ``Llama.generate`` reuses the cached prefix; consecutive samples of the
        same prompt therefore evaluate only the prompt's last token again.
        ``logprobs``: each token's log-probability under the model, read from the logits
        the sampler saw (a log-softmax per generated token; nothing else changes).
        """
        ll = self.llama
        room = self.n_ctx - len(prompt_tokens)
        if room < 1:
            raise ValueError(
                f"prompt: {len(prompt_tokens)} tokens do not fit the context window n_ctx={self.n_ctx}; "
                "shorten the prompt or open the backend with a larger n_ctx"
            )
        max_tokens = min(max_tokens, room)
        cached = self.cached_prefix(prompt_tokens)
        cached = min(cached, len(prompt_tokens) - 1)  # generate() replays at least the last prompt token
        ll.set_seed(seed)
        t0 = time.perf_counter()
        t_first = None
        out: list[int] = []
        buf = b""
        text: str | None = None  # set when a stop string fired
        cut: int | None = None
        lps: list[float] = []
        ends: list[int] = []
        finish = "length"
        gen = ll.generate(
            prompt_tokens,
            top_k=0,
            top_p=top_p,
            min_p=0.0,
            typical_p=1.0,
            temp=temperature,
            repeat_penalty=1.0,
            grammar=grammar,
        )
        try:
            for tok in gen:
                if t_first is None:
                    t_first = time.perf_counter()
                if self._is_eog(tok):
                    finish = "stop"
                    break
                if logprobs:  # the logits of the position just sampled from (the context's last output row)
                    row = np.ctypeslib.as_array(ll._ctx.get_logits_ith(-1), shape=(self.n_vocab,))
                    lps.append(float(row[tok]) - _logsumexp(row))
                out.append(tok)
                buf += ll.detokenize([tok])
                if logprobs:
                    ends.append(len(buf.decode("utf-8", errors="ignore")))
                if stop:
                    decoded = buf.decode("utf-8", errors="ignore")
                    at = find_stop(decoded, stop)
                    if at >= 0:
                        text, cut = decoded[:at], at
                        finish = "stop"
                        break
                if len(out) >= max_tokens:
                    break
        finally:
            gen.close()
        t_end = time.perf_counter()
        if text is None:
            text = buf.decode("utf-8", errors="ignore")
        t_first = t_first if t_first is not None else t_end
        return Sample(
            text=text,
            tokens=out,
            finish_reason=finish,
            seconds=t_end - t0,
            prefill_seconds=t_first - t0,
            decode_seconds=t_end - t_first,
            cached_tokens=cached,
            **(dict(zip(("token_logprobs", "token_ends"), text_logprobs(lps, ends, cut))) if logprobs else {}),
        )

    # -------------------------------------------------------------- scoring
    def _truncate(self, n: int) -> int:
        """Drop KV entries from position ``n`` on; returns the kept length (0 if the
        model cannot drop a suffix, e.g. recurrent models)."""
        ll = self.llama
        if ll._ctx.kv_cache_seq_rm(-1, n, -1):
            ll.n_tokens = n
            return n
        ll.reset()
        return 0

    def _decode_rows(self, seq: list[int], n_past: int) -> np.ndarray:
        """Decode ``seq`` at positions ``n_past..``, returning logits for every position [len(seq), V]."""
        ll = self.llama
        rows = np.empty((len(seq), self.n_vocab), dtype=np.float32)
        for off in range(0, len(seq), self.n_batch):
            chunk = seq[off : off + self.n_batch]
            ll._batch.set_batch(batch=chunk, n_past=n_past + off, logits_all=True)
            ll._ctx.decode(ll._batch)
            rows[off : off + len(chunk)] = np.ctypeslib.as_array(
                ll._ctx.get_logits(), shape=(len(chunk) * self.n_vocab,)
            ).reshape(len(chunk), self.n_vocab)
        ll.input_ids[n_past : n_past + len(seq)] = seq
        ll.n_tokens = n_past + len(seq)
        ll._requires_eval = False
        return rows

    def score(self, prompt_tokens: list[int], options: list[list[int]]) -> tuple[list[float], float, int]:
        """Total log-likelihood of each token sequence in ``options`` after ``prompt_tokens``.

        The prompt (all but its last token) is evaluated once, reusing whatever
        prefix the cache holds; each option is then decoded from that point
        together with the prompt's last token, with logits for every position.
        Returns (logprobs, prefill seconds, cached prompt tokens).
        """
        ll = self.llama
        base = len(prompt_tokens) - 1
        longest = max(len(o) for o in options)
        if base + 1 + longest > self.n_ctx:
            raise ValueError(
                f"prompt + longest option: {base + 1 + longest} tokens do not fit the context window "
                f"n_ctx={self.n_ctx}"
            )
        t0 = time.perf_counter()
        cached = min(self.cached_prefix(prompt_tokens), base)
        cached = self._truncate(cached)
        if base > cached:
            ll.eval(prompt_tokens[cached:base])
        prefill = time.perf_counter() - t0
        out: list[float] = []
        for opt in options:
            self._truncate(base)
            if ll.n_tokens != base:  # the model could not drop a suffix: rebuild the prompt
                ll.eval(prompt_tokens[:base])
            seq = [prompt_tokens[-1], *opt]
            rows = self._decode_rows(seq, base)
            total = 0.0
            for j, tok in enumerate(opt):
                total += float(rows[j, tok]) - _logsumexp(rows[j])
            out.append(total)
        return out, prefill, cached
