"""CPU glue of the memory op: ``metacog_fast._core.memory_scores`` / ``memory_rerank``
(csrc/cpu/memory_rerank.cpp; OpenMP over queries, per-ISA dot products, the GIL released).

Same names and argument order as :mod:`metacog_fast.ops.memory.naive`, on numpy arrays: queries
[Q, D] float32, keys [N, D] float32, last_access [N] float64, importance [N] float32, candidates
[C] or [Q, C] int64. The compiled functions check dtypes, layouts and shapes themselves (a
``ValueError`` naming the argument), so a wrong array never reaches the loop.
"""
from __future__ import annotations

import numpy as np

from metacog_fast._backend import core


def memory_scores(queries: np.ndarray, keys: np.ndarray, last_access: np.ndarray, importance: np.ndarray,
                  candidates: np.ndarray, now: float, weights: tuple[float, float, float], decay: float,
                  unit: float) -> np.ndarray:
    """Scores [Q, C] float32 (-inf at padding)."""
    return core().memory_scores(queries, keys, last_access, importance, candidates, now, *weights, decay, unit)


def memory_rerank(queries: np.ndarray, keys: np.ndarray, last_access: np.ndarray, importance: np.ndarray,
                  candidates: np.ndarray, k: int, now: float, weights: tuple[float, float, float], decay: float,
                  unit: float) -> tuple[np.ndarray, np.ndarray]:
    """(rows [Q, k] int64, scores [Q, k] float32), best first."""
    return core().memory_rerank(queries, keys, last_access, importance, candidates, k, now, *weights, decay, unit)


def memory_rerank_bounded(queries: np.ndarray, keys: np.ndarray, codes: np.ndarray, scale: np.ndarray,
                          err: np.ndarray, last_access: np.ndarray, importance: np.ndarray, candidates: np.ndarray,
                          k: int, now: float, weights: tuple[float, float, float], decay: float,
                          unit: float) -> tuple[np.ndarray, np.ndarray, int]:
    """(rows [Q, k], scores [Q, k], rows scored exactly): memory_rerank over shared candidates [C],
    int8 codes [N, D] with scale [N] / residual norm err [N] read first (csrc/cpu/memory_rerank.cpp)."""
    return core().memory_rerank_bounded(queries, keys, codes, scale, err, last_access, importance, candidates, k,
                                        now, *weights, decay, unit)
