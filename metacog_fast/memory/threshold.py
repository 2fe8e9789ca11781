"""Threshold search: the top-k of the docs/design.md §1.4 score for any weights, by bounds.

The score of record r for query q is ``A(r) + w_rel * rel(q, r)`` with the query-independent part
``A(r) = w_rec * decay ** ((now - last_access) / unit) + w_imp * importance / 10``. Records are
partitioned by importance level (``metacog_fast.memory.buckets``: one recency-sorted list per level),
so within a level ``A`` is monotone in last_access and a level's records that could still reach a
threshold ``tau`` form a suffix of its list (``buckets.la_min``), given a cap ``rel_cap >= rel(q, r)``
for every record outside the seeds.

1. **Seeds**: the ``m`` records nearest to the query (HNSW, when the planner trusts it) and the most
   recent records of each level; their exact scores give ``tau``, the k-th best so far.
2. **Completion**: every record whose bound ``A_max + w_rel * rel_cap`` reaches ``tau`` (per query).
   With ``rel_cap = 1`` (cosine <= 1) this is exact by construction; with ``rel_cap`` = the
   relevance of the m-th HNSW hit it is exact up to HNSW's own recall of those m neighbours (the
   planner only uses it where that recall was measured).
3. The union of the seeds' top-k and the completion is reranked exactly (compiled kernel).

Shapes: queries [Q, D]; candidates [Q, C] int64 rows (-1 padding); tau, rel_cap [Q].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metacog_fast.memory import buckets as bk


@dataclass
class Completion:
    """Records that could still reach each query's threshold."""

    rows: np.ndarray
    """[U] union over queries of the rows that pass their own query's bound."""
    mask: np.ndarray
    """[Q, U] bool: row u passes query q's bound."""

    def padded(self) -> np.ndarray:
        """[Q, max per query] rows, -1 padded."""
        return ragged_pad(self.rows, self.mask)


def thresholds(scores: np.ndarray, k: int) -> np.ndarray:
    """tau [Q] float64: the k-th best of the seed scores [Q, k] (best first; -inf if fewer than k)."""
    return scores[:, k - 1].astype(np.float64)


def bound_counts(lists: bk.BucketLists, owner: int, la_min: np.ndarray) -> int:
    """Upper estimate of the completion size (union over queries, stale list entries included),
    from binary searches only: decides between completion and a full scan before gathering."""
    lo_all = la_min.min(axis=0)
    total = 0
    for b in range(bk.N_BUCKETS):
        lst = lists._ready(owner, b)
        if lst is None:
            continue
        total += lst.n - int(lst.la[: lst.n].searchsorted(lo_all[b], side="left"))
    return total


def completion(lists: bk.BucketLists, owner: int, tau: np.ndarray, rel_cap: np.ndarray, now: float,
               weights: tuple[float, float, float], decay: float, unit: float) -> tuple[np.ndarray, int]:
    """(la_min [Q, levels], estimated size) for thresholds ``tau`` [Q] and caps ``rel_cap`` [Q]."""
    lm = bk.la_min(tau, rel_cap, lists.hi, now, weights, decay, unit)
    return lm, bound_counts(lists, owner, lm)


def gather(lists: bk.BucketLists, owner: int, la_min: np.ndarray) -> Completion:
    """The completion rows for ``la_min`` [Q, levels] (valid list entries only)."""
    rows, mask = lists.suffixes(owner, la_min)
    return Completion(rows, mask)


def ragged_pad(rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """rows [U] with a per-query selection mask [Q, U] -> [Q, max count] padded with -1."""
    Q = mask.shape[0]
    if rows.size == 0:
        return np.empty((Q, 0), np.int64)
    counts = mask.sum(axis=1)
    m = int(counts.max())
    if (counts == rows.size).all():
        return np.ascontiguousarray(np.broadcast_to(rows, (Q, m)))
    order = np.argsort(~mask, axis=1, kind="stable")[:, :m]
    out = rows[order]
    out[np.arange(m)[None, :] >= counts[:, None]] = -1
    return out
