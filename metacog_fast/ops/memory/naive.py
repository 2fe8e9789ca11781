"""Torch reference of the memory retrieval score (docs/design.md §1.4).

    score = w_rec * decay ** ((now - last_access) / unit)
          + w_rel * (cos + 1) / 2
          + w_imp * importance / 10

``cos`` is the dot product of an L2-normalised query and an L2-normalised key.
Times are seconds (float64); ``unit`` is the recency unit in seconds (1 hour).

Shapes: queries [Q, D], keys [N, D], last_access [N] float64, importance [N],
candidates [C] (shared by every query) or [Q, C] int64 rows of keys, -1 = padding.
"""
from __future__ import annotations

import torch

DECAY = 0.995
"""Recency decay per ``unit`` (docs/design.md §1.4)."""
UNIT_SECONDS = 3600.0
"""Recency unit: one hour of simulation time, in seconds."""


def memory_scores(
    queries: torch.Tensor,
    keys: torch.Tensor,
    last_access: torch.Tensor,
    importance: torch.Tensor,
    candidates: torch.Tensor,
    now: float,
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0),
    decay: float = DECAY,
    unit: float = UNIT_SECONDS,
) -> torch.Tensor:
    """Score of every candidate for every query: [Q, C] (float64 here; -inf at padding)."""
    w_rec, w_rel, w_imp = weights
    Q = queries.shape[0]
    cand = candidates.expand(Q, -1) if candidates.dim() == 1 else candidates
    valid = cand >= 0
    rows = cand.clamp(min=0)
    k = keys.to(torch.float64)[rows]  # [Q, C, D]
    cos = torch.einsum("qd,qcd->qc", queries.to(torch.float64), k)
    age_units = (now - last_access.to(torch.float64)[rows]) / unit
    recency = torch.pow(torch.tensor(decay, dtype=torch.float64), age_units)
    relevance = (cos + 1.0) / 2.0
    imp = importance.to(torch.float64)[rows] / 10.0
    score = w_rec * recency + w_rel * relevance + w_imp * imp
    return torch.where(valid, score, torch.full_like(score, float("-inf")))


def memory_rerank(
    queries: torch.Tensor,
    keys: torch.Tensor,
    last_access: torch.Tensor,
    importance: torch.Tensor,
    candidates: torch.Tensor,
    k: int,
    now: float,
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0),
    decay: float = DECAY,
    unit: float = UNIT_SECONDS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k distinct candidate rows per query, best first: (rows [Q, k] int64, scores [Q, k]).

    A row listed twice counts once. Fewer than k distinct valid candidates: the
    tail is row -1 with score -inf. Ties: the smaller row first.
    """
    scores = memory_scores(queries, keys, last_access, importance, candidates, now, weights, decay, unit)
    Q = queries.shape[0]
    cand = candidates.expand(Q, -1) if candidates.dim() == 1 else candidates
    cand = _drop_repeats(cand)
    scores = torch.where(cand >= 0, scores, torch.full_like(scores, float("-inf")))
    # Sort by (score desc, row asc): a stable sort on row first, then on score.
    order_row = torch.argsort(torch.where(cand >= 0, cand, torch.full_like(cand, 2**62)), dim=1, stable=True)
    s1 = torch.gather(scores, 1, order_row)
    order_score = torch.argsort(-s1, dim=1, stable=True)
    order = torch.gather(order_row, 1, order_score)
    top = order[:, :k]
    rows = torch.gather(cand, 1, top)
    top_scores = torch.gather(scores, 1, top)
    rows = torch.where(torch.isinf(top_scores), torch.full_like(rows, -1), rows)
    if top.shape[1] < k:  # fewer candidates than k
        pad = k - top.shape[1]
        rows = torch.cat([rows, torch.full((Q, pad), -1, dtype=rows.dtype)], dim=1)
        top_scores = torch.cat([top_scores, torch.full((Q, pad), float("-inf"), dtype=top_scores.dtype)], dim=1)
    return rows, top_scores


def _drop_repeats(cand: torch.Tensor) -> torch.Tensor:
    """Replace every repeat of a row within a query by -1 (first occurrence kept)."""
    out = cand.clone()
    for q in range(cand.shape[0]):
        seen: set[int] = set()
        for c in range(cand.shape[1]):
            r = int(cand[q, c])
            if r in seen:
                out[q, c] = -1
            seen.add(r)
    return out


def exact_scan_numpy(
    keys: "np.ndarray",
    last_access: "np.ndarray",
    importance: "np.ndarray",
    rows: "np.ndarray",
    queries: "np.ndarray",
    k: int,
    now: float,
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0),
    decay: float = DECAY,
    unit: float = UNIT_SECONDS,
) -> list[tuple["np.ndarray", "np.ndarray"]]:
    """Brute-force numpy scan (the benchmark anchor): for each query [Q, D] (unit
    norm), the top-k of ``rows`` [M] by the full score as (rows [k], scores [k]), best first."""
    import numpy as np

    w_rec, w_rel, w_imp = weights
    # Most rows: one matrix-vector product over the whole table, then pick (no copy of keys);
    # few rows: copy them first.
    dense = len(rows) > keys.shape[0] // 4
    keys_m = keys if dense else keys[rows]
    static = w_rec * np.power(decay, (now - last_access[rows]) / unit) + w_imp * importance[rows] / 10.0
    out = []
    for q in queries:
        cos = (keys_m @ q)[rows] if dense else keys_m @ q
        s = static + w_rel * (cos + 1.0) / 2.0
        kk = min(k, len(s))
        top = np.argpartition(-s, kk - 1)[:kk]
        top = top[np.lexsort((rows[top], -s[top]))]
        out.append((rows[top], s[top].astype(np.float32)))
    return out
