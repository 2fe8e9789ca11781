"""Wilson intervals, the paired bootstrap and the exact McNemar test against hand-computed values."""
from __future__ import annotations

import math

import numpy as np
import pytest

from metacog_fast.metrics import mcnemar_exact, paired_bootstrap, rate_with_interval, wilson_interval


def test_wilson_known_values():
    lo, hi = wilson_interval(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    lo10, hi10 = wilson_interval(10, 10)
    assert hi10 == 1.0 and lo10 == pytest.approx(0.7225, abs=1e-4)
    lo90, hi90 = wilson_interval(5, 10, 0.90)
    assert lo90 > lo and hi90 < hi  # a lower confidence gives a narrower interval
    r = rate_with_interval([True, False, True, True])
    assert r["successes"] == 3 and r["n"] == 4 and r["low"] < 0.75 < r["high"]


@pytest.mark.parametrize("args,match", [((3, 0), "n"), ((11, 10), "successes"), ((-1, 10), "successes")])
def test_wilson_rejects_bad_counts(args, match):
    with pytest.raises(ValueError, match=match):
        wilson_interval(*args)


def test_mcnemar_exact():
    a = [1] * 6 + [0] * 4
    b = [0] * 10
    r = mcnemar_exact(a, b)
    assert (r["a_only"], r["b_only"]) == (6, 0) and r["p_value"] == pytest.approx(2 / 64)
    assert mcnemar_exact(a, a)["p_value"] == 1.0
    # 7 vs 3 discordant: p = 2 * P(X <= 3), X ~ Bin(10, 1/2)
    x = [1] * 7 + [0] * 3
    y = [0] * 7 + [1] * 3
    want = 2 * sum(math.comb(10, i) for i in range(4)) / 2**10
    assert mcnemar_exact(x, y)["p_value"] == pytest.approx(want)
    with pytest.raises(ValueError, match="b"):
        mcnemar_exact([1, 0], [1])


def test_paired_bootstrap():
    same = paired_bootstrap([0.5, 1.0, 0.0], [0.5, 1.0, 0.0])
    assert same["diff"] == 0.0 and same["p_value"] == 1.0
    big = paired_bootstrap(np.ones(20), np.zeros(20))
    assert big["diff"] == 1.0 and big["low"] == big["high"] == 1.0 and big["p_value"] == 0.0
    rng = np.random.default_rng(0)
    a = rng.random(40)
    r = paired_bootstrap(a + 0.3, a)
    assert r["low"] <= 0.3 <= r["high"] and r["p_value"] < 0.01
    assert paired_bootstrap(a, a[::-1], seed=1) == paired_bootstrap(a, a[::-1], seed=1)  # seeded
    with pytest.raises(ValueError, match="at least 2"):
        paired_bootstrap([1.0], [0.0])
