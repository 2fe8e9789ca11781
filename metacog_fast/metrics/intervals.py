"""Uncertainty of success rates and of paired differences (docs/design.md §3.6, docs/statistics.md).

* :func:`wilson_interval`: the Wilson score interval of a binomial proportion (95 % by default);
  unlike the normal approximation it stays inside [0, 1] and is honest at 0 or n successes.
  :func:`success_interval` returns it as a :class:`RateInterval`.
* :func:`paired_bootstrap`: the difference of two configurations' means over the same units
  (games, tasks), resampling units with replacement; a percentile interval and a two-sided p-value.
  :func:`compare_paired` pairs two ``{unit id: value}`` mappings by id and returns a
  :class:`PairedDifference`.
* :func:`mean_interval`: the mean of per-unit values (e.g. per-task scores) with a bootstrap
  percentile interval over units.
* :func:`mcnemar_exact`: the exact McNemar test of two paired binary outcomes (discordant pairs).

p-value of the paired bootstrap: twice the smaller share of resampled mean differences on either
side of 0 (a resample exactly at 0 counts on both sides, which errs towards larger p), capped at 1;
1 when every paired difference is 0. It agrees with the percentile interval: p < 1 - confidence
exactly when the interval excludes 0 (up to resamples tied at 0). Its resolution is 2 / resamples;
0 means "below 1 / resamples", which the reports print as ``p < 1e-04`` for 10,000 resamples.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Hashable, Mapping

import numpy as np

from metacog_fast.metrics._checks import as_binary, as_vector, same_length
from metacog_fast.metrics.resample import check_resamples, check_seed, mean_replicates, unit_indices


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
    """Mean of ``a - b`` over paired units (a [n], b [n]) with a bootstrap percentile interval and the
    two-sided p-value of "no difference" (module docstring): {"diff", "low", "high", "p_value", "n"}."""
    x = as_vector(a, "a")
    y = as_vector(b, "b")
    same_length(x, y, "a", "b")
    if x.size < 2:
        raise ValueError(f"a, b: expected at least 2 paired units, got {x.size}")
    B = check_resamples(resamples)
    sd = check_seed(seed)
    _z(confidence)
    d = x - y
    means = mean_replicates(d, unit_indices(d.size, B, sd))
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return {"diff": float(d.mean()), "low": float(lo), "high": float(hi), "p_value": bootstrap_p_value(means, d),
            "n": int(d.size)}


def mean_interval(values: Any, resamples: int = 10000, confidence: float = 0.95, seed: int = 0) -> dict[str, float]:
    """Mean of ``values`` [n] (one per unit: task, game, seed) with its bootstrap percentile interval
    over units: {"mean", "low", "high", "n"}. With one unit the interval is that value."""
    x = as_vector(values, "values")
    B = check_resamples(resamples)
    sd = check_seed(seed)
    _z(confidence)
    means = mean_replicates(x, unit_indices(x.size, B, sd))
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [alpha, 1.0 - alpha])
    return {"mean": float(x.mean()), "low": float(lo), "high": float(hi), "n": int(x.size)}


def bootstrap_p_value(means: np.ndarray, d: np.ndarray) -> float:
    """Two-sided p of "mean difference 0" from the resampled means [B] of the differences d [n]."""
    if np.all(d == 0):
        return 1.0
    return float(min(1.0, 2.0 * min((means <= 0).mean(), (means >= 0).mean())))


@dataclass(frozen=True)
class RateInterval:
    """A success rate with its Wilson interval."""

    rate: float
    """successes / n."""
    low: float
    """Lower end of the Wilson interval."""
    high: float
    """Upper end of the Wilson interval."""
    successes: int
    """Successful episodes."""
    n: int
    """Episodes."""
    confidence: float = 0.95
    """Coverage of the interval."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        """``42% [30%, 55%] (25/60)``."""
        return f"{100 * self.rate:.0f}% [{100 * self.low:.0f}%, {100 * self.high:.0f}%] ({self.successes}/{self.n})"


def success_interval(outcomes: Any, confidence: float = 0.95) -> RateInterval:
    """Success rate of binary ``outcomes`` [n] (one per episode) with its Wilson interval."""
    r = rate_with_interval(outcomes, confidence)
    return RateInterval(float(r["rate"]), float(r["low"]), float(r["high"]), int(r["successes"]), int(r["n"]),
                        confidence)


@dataclass(frozen=True)
class PairedDifference:
    """Mean difference A - B over units both sides have, with its paired-bootstrap interval and p."""

    diff: float | None
    """mean over common units of a[u] - b[u]; None when undefined."""
    low: float | None
    """Lower end of the percentile interval."""
    high: float | None
    """Upper end of the percentile interval."""
    p_value: float | None
    """Two-sided bootstrap p of "no difference" (intervals module docstring)."""
    n: int
    """Units (games, tasks) both sides have."""
    a_mean: float | None
    """Mean of A over the common units."""
    b_mean: float | None
    """Mean of B over the common units."""
    only_a: int = 0
    """Units only A has (left out of the comparison)."""
    only_b: int = 0
    """Units only B has (left out)."""
    defined: bool = True
    """False with fewer than 2 common units."""
    reason: str | None = None
    """Why the comparison is undefined."""
    confidence: float = 0.95
    """Coverage of the interval."""
    resamples: int = 10000
    """Bootstrap resamples."""
    seed: int = 0
    """Seed of the resamples."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, scale: float = 1.0, nd: int = 2) -> str:
        """``+0.12 [-0.03, +0.27], p = 0.11 (n=60)``; values multiplied by ``scale`` (100 for %)."""
        if not self.defined or self.diff is None:
            return f"undefined ({self.reason})"
        return (f"{scale * self.diff:+.{nd}f} [{scale * self.low:+.{nd}f}, {scale * self.high:+.{nd}f}], "
                f"{format_p(self.p_value, self.resamples)} (n={self.n})")


def format_p(p: float | None, resamples: int) -> str:
    """``p = 0.031``, or ``p < 1e-04`` when no resample crossed 0 (below the bootstrap's resolution)."""
    cell = p_cell(p, resamples)
    return f"p {cell}" if cell.startswith("<") else f"p = {cell}"


def p_cell(p: float | None, resamples: int) -> str:
    """A p-value for a table cell: ``0.031``, ``0.0012``, ``1``, ``< 1e-04`` (p = 0), ``n/a``."""
    if p is None:
        return "n/a"
    if p == 0.0:
        return f"< {1.0 / resamples:.0e}"
    if p >= 1.0:
        return "1"
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}".rstrip("0").rstrip(".")


def compare_paired(a: Mapping[Hashable, float], b: Mapping[Hashable, float], resamples: int = 10000,
                   confidence: float = 0.95, seed: int = 0) -> PairedDifference:
    """Paired bootstrap of A - B over the unit ids (game, task) both ``a`` and ``b`` map to a value.

    Units are put in the order of ``sorted(map(str, ids))`` before resampling, so the result does
    not depend on the mappings' order. Undefined (None + reason) with fewer than 2 common units."""
    for name, m in (("a", a), ("b", b)):
        if not isinstance(m, Mapping):
            raise TypeError(f"{name}: expected a mapping {{unit id: value}}, got {type(m).__name__}")
    B = check_resamples(resamples)
    sd = check_seed(seed)
    _z(confidence)
    common = sorted(set(a) & set(b), key=str)
    only_a, only_b = len(set(a) - set(b)), len(set(b) - set(a))
    if len(common) < 2:
        return PairedDifference(None, None, None, None, len(common), None, None, only_a, only_b, False,
                                f"{len(common)} common units < 2", confidence, B, sd)
    xa = as_vector([a[u] for u in common], "a")
    xb = as_vector([b[u] for u in common], "b")
    r = paired_bootstrap(xa, xb, B, confidence, sd)
    return PairedDifference(r["diff"], r["low"], r["high"], r["p_value"], r["n"], float(xa.mean()), float(xb.mean()),
                            only_a, only_b, True, None, confidence, B, sd)


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
