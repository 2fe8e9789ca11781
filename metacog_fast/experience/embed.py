"""Text embedders for deduplication and SOP lookup: ``embed(texts) -> [N, 384] float32`` unit rows."""
from __future__ import annotations

import re
import zlib
from typing import Callable, Sequence

import numpy as np

DIM = 384
Embedder = Callable[[Sequence[str]], np.ndarray]

_WORD = re.compile(r"[a-z]+")


def hashing_embedder(texts: Sequence[str]) -> np.ndarray:
    """Bag of words and word bigrams, hashed (crc32) into 384 signed buckets, L2-normalised.

    Deterministic and instant: the default for tests and CPU-bound runs. Digits are dropped so
    "apple 1" and "apple 2" embed alike (object numbers differ across games).
    """
    out = np.zeros((len(texts), DIM), dtype=np.float32)
    for i, t in enumerate(texts):
        words = _WORD.findall(t.lower())
        feats = words + [a + "_" + b for a, b in zip(words, words[1:])]
        for f in feats:
            h = zlib.crc32(f.encode())
            out[i, h % DIM] += 1.0 if (h >> 16) & 1 else -1.0
        n = np.linalg.norm(out[i])
        out[i] = out[i] / n if n > 0 else _unit(i)
    return out


def _unit(i: int) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[0] = 1.0
    return v


def minilm_embedder() -> Embedder:
    """The package's MiniLM encoder (metacog_fast.scoring.encoder), loaded once."""
    from metacog_fast.scoring.encoder import MiniLMEncoder

    enc = MiniLMEncoder()

    def embed(texts: Sequence[str]) -> np.ndarray:
        e = np.asarray(enc.encode(list(texts)), dtype=np.float32)
        return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)

    return embed


def make_embedder(name: str) -> Embedder:
    if name == "hashing":
        return hashing_embedder
    if name == "minilm":
        return minilm_embedder()
    raise ValueError(f"embedder must be 'hashing' or 'minilm', got {name!r}")
