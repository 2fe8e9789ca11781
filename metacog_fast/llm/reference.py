"""Readable references on a raw ``llama_cpp.Llama``, used by the tests and the benchmarks.

They deliberately bypass this package's layer: no prefix reuse, no batching of
options, nothing clever.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def log_softmax(row: np.ndarray) -> np.ndarray:
    """[V] logits -> [V] log-probabilities (float64)."""
    r = row.astype(np.float64)
    m = r.max()
    return r - m - np.log(np.exp(r - m).sum())


def reference_loglik(llama: Any, prompt: str, option: str) -> float:
    """Total log-likelihood of ``option`` after ``prompt``, evaluated from scratch in one pass.

    ``llama`` must be created with ``logits_all=True``. Tokenization as in
    :meth:`LLM.choose`: the prompt with BOS (if the model wants one) and special
    tokens, the option on its own.
    """
    p = llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
    o = llama.tokenize(option.encode("utf-8"), add_bos=False, special=False)
    llama.reset()
    llama.eval(p + o)
    return float(sum(log_softmax(llama.scores[len(p) - 1 + j])[t] for j, t in enumerate(o)))


def raw_greedy(llama: Any, prompt: str, max_tokens: int) -> list[int]:
    """Greedy continuation with ``Llama.generate``: the plain llama-cpp-python loop, stopping at
    an end-of-generation token or after ``max_tokens``. Returns the generated token ids."""
    import llama_cpp

    tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
    out: list[int] = []
    for tok in llama.generate(tokens, top_k=0, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
        if llama_cpp.llama_vocab_is_eog(llama._model.vocab, tok):
            break
        out.append(tok)
        if len(out) >= max_tokens:
            break
    return out
