"""Type-2 (metacognitive) metrics: how well a confidence signal separates successes from failures.

AUROC2 is the ROC AUC of the signal against the outcome (Fleming & Lau 2014),
computed from average ranks, so tied signals count half (Mann-Whitney U).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from metacog_fast.metrics._checks import as_binary, as_vector, same_length


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of x [N], ties given the mean of the ranks they span."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    # boundaries of runs of equal values
    starts = np.r_[0, np.flatnonzero(np.diff(xs)) + 1]
    ends = np.r_[starts[1:], xs.size]
    avg = (starts + ends + 1) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def _prepare(signal: Any, outcome: Any) -> tuple[np.ndarray, np.ndarray]:
    s = as_vector(signal, "signal")
    y = as_binary(outcome, "outcome")
    same_length(s, y, "signal", "outcome")
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.size:
        cls = "successes" if n_pos else "failures"
        raise ValueError(f"outcome: AUROC needs both classes, got only {cls} ({y.size} values)")
    return s, y


def auroc2(signal: Any, outcome: Any) -> float:
    """ROC AUC of ``signal`` [N] (higher = more confident of success) against binary ``outcome`` [N].

    Ties are handled by average rank. Raises ValueError on empty or mismatched
    inputs, NaN/inf, non-binary outcomes, or a single class.
    """
    s, y = _prepare(signal, outcome)
    ranks = average_ranks(s)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    u = ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def type2_roc(signal: Any, outcome: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Type-2 ROC curve: (fpr, tpr, thresholds), each [K+1] for K distinct signal values.

    ``thresholds`` are decreasing; the first is +inf (nothing predicted a success),
    point k predicts success where ``signal >= thresholds[k]``. Same convention as
    ``sklearn.metrics.roc_curve(..., drop_intermediate=False)``.
    """
    s, y = _prepare(signal, outcome)
    order = np.argsort(-s, kind="mergesort")
    ss, ys = s[order], y[order]
    last_of_run = np.r_[np.flatnonzero(np.diff(ss)), ss.size - 1]
    tps = np.cumsum(ys)[last_of_run]
    fps = (last_of_run + 1) - tps
    n_pos = y.sum()
    n_neg = y.size - n_pos
    fpr = np.r_[0.0, fps / n_neg]
    tpr = np.r_[0.0, tps / n_pos]
    thresholds = np.r_[np.inf, ss[last_of_run]]
    return fpr, tpr, thresholds


def metacognitive_accuracy(probs: Any, labels: Any, threshold: float = 0.5) -> float:
    """Fraction of predictions ``probs >= threshold`` equal to the binary ``labels``.

    probs and labels: same shape (e.g. [N] chunk-wise, or [steps, 5] quantile-wise),
    probs in [0, 1].
    """
    p = as_vector(probs, "probs")
    y = as_binary(labels, "labels")
    same_length(p, y, "probs", "labels")
    if not (0.0 <= float(threshold) <= 1.0):
        raise ValueError(f"threshold: expected a value in [0, 1], got {threshold}")
    if (p < 0).any() or (p > 1).any():
        raise ValueError("probs: expected probabilities in [0, 1]")
    return float(((p >= threshold).astype(np.int64) == y).mean())
