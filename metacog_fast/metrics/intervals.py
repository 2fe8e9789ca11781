"""Uncertainty of success rates and of paired differences (docs/design.md §3.6).

* :func:`wilson_interval`: the Wilson score interval of a binomial proportion (95 % by default);
  unlike the normal approximation it stays inside [0, 1] and is honest at 0 or n successes.
* :func:`paired_bootstrap`: the difference of two configurations' means over the same units
  (games, tasks), resampling units with replacement; a percentile interval and a two-sided p-value.
* :func:`mcnemar_exact`: the exact McNemar test of two paired binary outcomes (discordant pairs).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from metacog_fast.metrics._checks import as_binary, as_vector, same_length


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence: expected a value in (0, 1), got {confidence}")
    from statistics import NormalDist

    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """(low, high) Wilson score interval of ``successes`` out of ``n``."""
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n: expected a positive count, got {n!r}")
    if not isinstance(successes, (int, np.integer)) or not 0 <= successes <= n:
        raise ValueError(f"successes: expected an int in [0, {n}], got {successes!r}")
    z = _z(confidence)
    p = successes / n
    den = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    lo = 0.0 if successes == 0 else max(0.0, centre - half)  # exact ends: no rounding residue
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return lo, hi


def rate_with_interval(outcomes: Any, confidence: float = 0.95) -> dict[str, float | int]:
    """{"rate", "low", "high", "successes", "n"} of binary ``outcomes``."""
    y = as_binary(outcomes, "outcomes")
    k, n = int(y.sum()), int(y.size)
    lo, hi = wilson_interval(k, n, confidence)
    return {"rate": k / n, "low": lo, "high": hi, "successes": k, "n": n}


def paired_bootstrap(a: Any, b: Any, resamples: int = 10000, confidence: float = 0.95,
                     seed: int = 0) -> dict[str, float]:
    """Mean of ``a - b`` over paired units with a bootstrap percentile interval and the two-sided
    p-value of "no difference" (twice the smaller tail of the resampled differences around 0)."""
    x = as_vector(a, "a")
    y = as_vector(b, "b")
    same_length(x, y, "a", "b")
    if x.size < 2:
        raise ValueError(f"a, b: expected at least 2 paired units, got {x.size}")
    if not isinstance(resamples, int) or resamples < 100:
        raise ValueError(f"resamples: expected an int >= 100, got {resamples!r}")
    _z(confidence)
    d = x - y
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(resamples, d.size))
    means = d[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    if np.all(d == 0):
        p = 1.0
    else:
        p = float(min(1.0, 2.0 * min((means <= 0).mean(), (means >= 0).mean())))
    return {"diff": float(d.mean()), "low": float(lo), "high": float(hi), "p_value": p, "n": int(d.size)}


def mcnemar_exact(a: Any, b: Any) -> dict[str, float | int]:
    """Exact two-sided McNemar test of paired binary outcomes ``a`` and ``b``:
    {"a_only", "b_only", "p_value"} (p = 1 when no pair is discordant)."""
    x = as_binary(a, "a")
    y = as_binary(b, "b")
    same_length(x, y, "a", "b")
    n10 = int(((x == 1) & (y == 0)).sum())
    n01 = int(((x == 0) & (y == 1)).sum())
    n = n10 + n01
    if n == 0:
        return {"a_only": 0, "b_only": 0, "p_value": 1.0}
    k = min(n10, n01)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n
    return {"a_only": n10, "b_only": n01, "p_value": float(min(1.0, 2.0 * tail))}
