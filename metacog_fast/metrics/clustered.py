"""AUROC2 with a cluster-bootstrap interval over episodes, and AUROC2 within task type.

A self-assessment signal is scored on many rows (chunks, steps) per episode, and the rows of one
episode are not independent: they share its outcome and mostly its signal. Resampling rows as if
they were independent makes the interval far too narrow (one successful episode with 40 chunks
looks like 40 successes). Here the unit of resampling is the **episode**: a resample draws
episodes with replacement and keeps all of an episode's rows.

Definitions (docs/statistics.md):

* **AUROC2** of signal s against outcome y over rows: the probability that a random positive row
  scores above a random negative row, ties counting half (Mann-Whitney U / (P N)); the same
  number as :func:`metacog_fast.metrics.auroc2`.
* **positives / negatives**: distinct episodes with at least one positive / negative row. The
  result is *undefined* (value None, ``reason`` says why) when either is below ``min_episodes``
  (5): with fewer, the estimate and its interval are dominated by one or two episodes.
* **Interval**: percentile interval of the AUROC2 over ``resamples`` cluster-bootstrap resamples,
  stratified by episode kind (only positive rows / only negative rows / both), so every resample
  holds as many successful and failed episodes as the data (the stratified bootstrap of pROC, with
  episodes as the units).
* **Within-type AUROC2** (pooled): only pairs of a positive and a negative row *of the same task
  type* are compared: sum_t U_t / sum_t P_t N_t. Types whose base rates differ cannot inflate it
  (a signal that only knows the type scores 0.5), unlike the AUROC2 over all rows. It equals the
  average of the per-type AUROC2 weighted by each type's number of positive x negative row pairs.
  Types with no positive or no negative episode contribute no pairs; the 5-episode rule applies to
  the episodes of the contributing types. The bootstrap resamples within (type, kind) strata.

Computation: with K[e, f] = sum over positive rows i of episode e and negative rows j of episode f
of H(s_i - s_j) (1 above, 1/2 tied), p_e / n_e the positive / negative rows of e and c_b the
counts with which resample b drew each episode, the replicate AUROC2 is exactly
(c_b K c_b) / (c_b D c_b) with D = p n^T (sum over types of p_t n_t^T for the within-type AUROC2,
K then masked to same-type pairs). K is non-zero only between episodes with a positive row and
episodes with a negative row; that [E_pos, E_neg] block is built once in O(R log R + E G) and
each replicate then costs one [E_pos] x [E_pos, E_neg] product (metrics/resample.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Hashable, Sequence

import numpy as np

from metacog_fast.metrics._checks import as_binary, as_vector, same_length
from metacog_fast.metrics.intervals import _z
from metacog_fast.metrics.resample import (
    _BLOCK_ELEMENTS,
    check_resamples,
    check_seed,
    ratio_of_quadratic_forms,
    stratified_counts,
)

MIN_EPISODES = 5
"""Fewer distinct positive or negative episodes than this: AUROC2 is undefined."""


@dataclass(frozen=True)
class Auroc2Result:
    """AUROC2 of a signal with its cluster-bootstrap interval (None throughout when undefined)."""

    value: float | None
    """AUROC2 over all rows (ties half); None when undefined."""
    low: float | None
    """Lower end of the percentile interval."""
    high: float | None
    """Upper end of the percentile interval."""
    positives: int
    """Distinct episodes with at least one positive (successful) row."""
    negatives: int
    """Distinct episodes with at least one negative (failed) row."""
    rows: int
    """Rows (chunks, steps) scored."""
    defined: bool
    """False when positives or negatives is below ``min_episodes``."""
    reason: str | None = None
    """Why the result is undefined (None when defined)."""
    confidence: float = 0.95
    """Coverage of the interval."""
    resamples: int = 0
    """Bootstrap resamples drawn (0 when undefined)."""
    seed: int = 0
    """Seed of the resamples."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, nd: int = 2) -> str:
        """``0.71 [0.62, 0.80] (12+/30- ep)`` or ``undefined (n positives = 3 < 5)``."""
        if not self.defined or self.value is None:
            return f"undefined ({self.reason})"
        return f"{self.value:.{nd}f} [{self.low:.{nd}f}, {self.high:.{nd}f}] ({self.positives}+/{self.negatives}- ep)"


@dataclass(frozen=True)
class Auroc2ByType:
    """AUROC2 per task type and the pooled within-type AUROC2 (docs/statistics.md)."""

    per_type: dict[str, Auroc2Result]
    """Task type -> its AUROC2 (each with its own 5-episode rule)."""
    pooled: Auroc2Result
    """Pairs compared only within a type, pooled over the types that have both outcomes."""
    contributing_types: list[str] = field(default_factory=list)
    """Types with at least one positive and one negative episode (the ones in ``pooled``)."""

    def to_dict(self) -> dict[str, Any]:
        return {"per_type": {t: r.to_dict() for t, r in self.per_type.items()}, "pooled": self.pooled.to_dict(),
                "contributing_types": list(self.contributing_types)}


def _codes(ids: Sequence[Hashable], name: str, n: int) -> tuple[np.ndarray, list[Hashable]]:
    """[R] int codes of ``ids`` (any hashables) in order of first appearance, and the distinct ids."""
    try:
        seq = list(ids)
    except TypeError:
        raise TypeError(f"{name}: expected a sequence of ids, got {type(ids).__name__}") from None
    if len(seq) != n:
        raise ValueError(f"{name}: expected {n} ids to match signal, got {len(seq)}")
    table: dict[Hashable, int] = {}
    try:
        codes = np.fromiter((table.setdefault(x if not isinstance(x, list) else tuple(x), len(table)) for x in seq),
                            dtype=np.int64, count=n)
    except TypeError as exc:
        raise TypeError(f"{name}: ids must be hashable ({exc})") from None
    return codes, list(table)


MAX_PAIR_MATRIX = 50_000_000
"""Largest (episodes with a success) x (episodes with a failure) pair matrix built (400 MB)."""


def _pair_matrix(s: np.ndarray, y: np.ndarray, ep: np.ndarray, E: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(K [Ep, En], rows [Ep], cols [En]): rows / cols are the episodes with a positive / negative
    row, K[a, b] = sum over positive rows i of episode rows[a] and negative rows j of episode
    cols[b] of (1[s_i > s_j] + 0.5 * 1[s_i == s_j]); the rest of the [E, E] matrix is zero."""
    pos, neg = y == 1, y == 0
    rows = np.unique(ep[pos])
    cols = np.unique(ep[neg])
    Ep, En = rows.size, cols.size
    if Ep * En > MAX_PAIR_MATRIX:
        raise ValueError(f"episodes: {Ep} episodes with a success x {En} with a failure need a "
                         f"{8 * Ep * En / 1e9:.1f} GB pair matrix (at most {MAX_PAIR_MATRIX:,} cells); "
                         "give rows of one episode the same id")
    _, g = np.unique(s, return_inverse=True)
    g = g.reshape(-1)
    G = int(g.max()) + 1
    row_of = np.full(E, -1, dtype=np.int64)
    row_of[rows] = np.arange(Ep)
    col_of = np.full(E, -1, dtype=np.int64)
    col_of[cols] = np.arange(En)
    gp, ip = g[pos], row_of[ep[pos]]
    gn, jn = g[neg], col_of[ep[neg]]
    K = np.zeros((Ep, En), dtype=np.float64)
    carry = np.zeros(Ep, dtype=np.float64)  # positive rows of each episode in the groups above the block
    blk = max(1, _BLOCK_ELEMENTS // max(1, Ep, En))
    for h1 in range(G, 0, -blk):  # from the highest signal values down
        h0 = max(0, h1 - blk)
        w = h1 - h0
        mp = (gp >= h0) & (gp < h1)
        mn = (gn >= h0) & (gn < h1)
        if not mn.any():
            if mp.any():
                carry += np.bincount(ip[mp], minlength=Ep)
            continue
        Pb = np.bincount(ip[mp] * w + (gp[mp] - h0), minlength=Ep * w).reshape(Ep, w).astype(np.float64)
        Nb = np.bincount(jn[mn] * w + (gn[mn] - h0), minlength=En * w).reshape(En, w).astype(np.float64)
        # positives strictly above group h within the block: reverse cumulative sum, excluding h
        above = np.cumsum(Pb[:, ::-1], axis=1)[:, ::-1] - Pb
        K += (carry[:, None] + above + 0.5 * Pb) @ Nb.T
        carry += Pb.sum(axis=1)
    return K, rows, cols


def replicate_auroc2(s: np.ndarray, y: np.ndarray, ep: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[B] AUROC2 of the data rebuilt from each row of episode counts [B, E] (signal s [R], binary
    outcome y [R], episode codes ep [R] in [0, E)): the numpy kernel of the cluster bootstrap."""
    E = counts.shape[1]
    p, n, _ = _episode_kinds(y, ep, E)
    K, rows, cols = _pair_matrix(s, y, ep, E)
    return ratio_of_quadratic_forms(counts, K, rows, cols, p[:, None], n[:, None])


def _undefined(positives: int, negatives: int, rows: int, min_episodes: int, confidence: float, seed: int,
               why: str | None = None) -> Auroc2Result:
    if why is None:
        parts = []
        if positives < min_episodes:
            parts.append(f"n positives = {positives} < {min_episodes}")
        if negatives < min_episodes:
            parts.append(f"n negatives = {negatives} < {min_episodes}")
        why = ", ".join(parts)
    return Auroc2Result(None, None, None, positives, negatives, rows, False, why, confidence, 0, seed)


def _check_common(signal: Any, outcome: Any, episodes: Any, resamples: Any, confidence: float, seed: Any,
                  min_episodes: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Hashable], int, int, int]:
    s = as_vector(signal, "signal")
    y = as_binary(outcome, "outcome")
    same_length(s, y, "signal", "outcome")
    ep, ep_ids = _codes(episodes, "episodes", s.size)
    B = check_resamples(resamples)
    sd = check_seed(seed)
    _z(confidence)
    if isinstance(min_episodes, bool) or not isinstance(min_episodes, (int, np.integer)) or min_episodes < 1:
        raise ValueError(f"min_episodes: expected a positive int, got {min_episodes!r}")
    return s, y, ep, ep_ids, B, sd, int(min_episodes)


def _episode_kinds(y: np.ndarray, ep: np.ndarray, E: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per episode: positive rows [E], negative rows [E], kind [E] (0 only pos, 1 only neg, 2 both)."""
    p = np.bincount(ep, weights=(y == 1).astype(np.float64), minlength=E)
    n = np.bincount(ep, weights=(y == 0).astype(np.float64), minlength=E)
    kind = np.where(n == 0, 0, np.where(p == 0, 1, 2))
    return p, n, kind


def _bootstrap(pairs: tuple[np.ndarray, np.ndarray, np.ndarray], P: np.ndarray, N: np.ndarray,
               strata: np.ndarray, resamples: int, confidence: float, seed: int) -> tuple[float, float]:
    counts = stratified_counts(strata, resamples, seed)
    reps = ratio_of_quadratic_forms(counts, *pairs, P, N)
    reps = reps[np.isfinite(reps)]
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def auroc2_clustered(signal: Any, outcome: Any, episodes: Sequence[Hashable], resamples: int = 10000,
                     confidence: float = 0.95, seed: int = 0, min_episodes: int = MIN_EPISODES) -> Auroc2Result:
    """AUROC2 of ``signal`` [R] against binary ``outcome`` [R] with a cluster-bootstrap interval over
    ``episodes`` [R] (an id per row: all rows of an id are resampled together).

    Undefined (value None with a reason) when fewer than ``min_episodes`` distinct episodes have a
    positive row, or a negative one. Deterministic for a given ``seed``."""
    s, y, ep, ep_ids, B, sd, mn = _check_common(signal, outcome, episodes, resamples, confidence, seed, min_episodes)
    E = len(ep_ids)
    p, n, kind = _episode_kinds(y, ep, E)
    positives, negatives = int((p > 0).sum()), int((n > 0).sum())
    if positives < mn or negatives < mn:
        return _undefined(positives, negatives, s.size, mn, confidence, sd)
    pairs = _pair_matrix(s, y, ep, E)
    value = float(pairs[0].sum() / (p.sum() * n.sum()))
    lo, hi = _bootstrap(pairs, p[:, None], n[:, None], kind, B, confidence, sd)
    return Auroc2Result(value, lo, hi, positives, negatives, int(s.size), True, None, confidence, B, sd)


def auroc2_within_types(signal: Any, outcome: Any, episodes: Sequence[Hashable], types: Sequence[Hashable],
                        resamples: int = 10000, confidence: float = 0.95, seed: int = 0,
                        min_episodes: int = MIN_EPISODES) -> Auroc2ByType:
    """AUROC2 per task type (``types`` [R], one per row, constant within an episode) and the
    pooled within-type AUROC2 (pairs compared only within a type; module docstring)."""
    s, y, ep, ep_ids, B, sd, mn = _check_common(signal, outcome, episodes, resamples, confidence, seed, min_episodes)
    ty, ty_ids = _codes(types, "types", s.size)
    E = len(ep_ids)
    ep_type = np.full(E, -1, dtype=np.int64)
    ep_type[ep] = ty
    if not np.array_equal(ep_type[ep], ty):
        bad = ep_ids[int(ep[np.flatnonzero(ep_type[ep] != ty)[0]])]
        raise ValueError(f"types: expected one task type per episode, episode {bad!r} has rows of two types")
    p, n, kind = _episode_kinds(y, ep, E)
    per_type: dict[str, Auroc2Result] = {}
    for t, name in enumerate(ty_ids):
        m = ty == t
        per_type[str(name)] = auroc2_clustered(s[m], y[m], ep[m].tolist(), B, confidence, sd, mn)
    contributing = [t for t in range(len(ty_ids))
                    if (p[ep_type == t] > 0).any() and (n[ep_type == t] > 0).any()]
    in_pool = np.isin(ep_type, contributing)
    positives, negatives = int(((p > 0) & in_pool).sum()), int(((n > 0) & in_pool).sum())
    names = [str(ty_ids[t]) for t in contributing]
    if not contributing:
        pooled = _undefined(0, 0, 0, mn, confidence, sd, "no task type has both a successful and a failed episode")
    elif positives < mn or negatives < mn:
        pooled = _undefined(positives, negatives, int(in_pool[ep].sum()), mn, confidence, sd)
    else:
        K, rows, cols = _pair_matrix(s, y, ep, E)
        K = K * (ep_type[rows][:, None] == ep_type[cols][None, :])  # same-type pairs only
        onehot = (ep_type[:, None] == np.arange(len(ty_ids))[None, :]).astype(np.float64)  # [E, T]
        P, N = p[:, None] * onehot, n[:, None] * onehot
        value = float(K.sum() / (P.sum(axis=0) * N.sum(axis=0)).sum())
        lo, hi = _bootstrap((K, rows, cols), P, N, ep_type * 3 + kind, B, confidence, sd)
        pooled = Auroc2Result(value, lo, hi, positives, negatives, int(in_pool[ep].sum()), True, None, confidence,
                              B, sd)
    return Auroc2ByType(per_type, pooled, names)


def accuracy_clustered(probs: Any, labels: Any, episodes: Sequence[Hashable], threshold: float = 0.5,
                       resamples: int = 10000, confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """Metacognitive accuracy (fraction of rows with ``probs >= threshold`` equal to ``labels``) with a
    cluster-bootstrap interval over ``episodes`` [R], stratified by episode kind as AUROC2 is, so each
    resample keeps the data's numbers of successful and failed episodes:
    {"value", "low", "high", "positives", "negatives", "rows", "confidence", "resamples", "seed"}.

    The interval matters most where accuracy is least informative: when failures dominate, a
    scorer that always says "fail" is accurate at the failure base rate, and the row count makes
    an i.i.d. interval look far narrower than the few episodes behind it allow."""
    from metacog_fast.metrics.type2 import metacognitive_accuracy

    s, y, ep, ep_ids, B, sd, _ = _check_common(probs, labels, episodes, resamples, confidence, seed, 1)
    value = metacognitive_accuracy(s, y, threshold)
    E = len(ep_ids)
    p, n, kind = _episode_kinds(y, ep, E)
    correct = np.bincount(ep, weights=((s >= threshold).astype(np.int64) == y).astype(np.float64), minlength=E)
    rows = np.bincount(ep, minlength=E).astype(np.float64)
    counts = stratified_counts(kind, B, sd)  # [B, E]
    reps = (counts @ correct) / (counts @ rows)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
    return {"value": float(value), "low": float(lo), "high": float(hi), "positives": int((p > 0).sum()),
            "negatives": int((n > 0).sum()), "rows": int(s.size), "confidence": confidence, "resamples": B, "seed": sd}
