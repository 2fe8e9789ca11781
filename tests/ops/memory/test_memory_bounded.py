"""memory_rerank_bounded (the planner's scan): int8 codes bound the scores, only candidates that can
reach the top-k are scored from the float keys, so rows, scores and order equal memory_rerank's —
ties included — on every backend; and the quantiser's error bound holds."""
from __future__ import annotations

import numpy as np
import pytest

from metacog_fast.memory.table import quantize
from metacog_fast.ops.memory import api



def _unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _case(rng, n, d, ties=False, same_time=False):
    keys = _unit(rng, n, d)
    if ties:
        keys[n // 2:] = keys[0]
    la = np.full(n, 5.0) if same_time else rng.uniform(0, 1e6, n)
    imp = rng.integers(1, 11, n).astype(np.float32)
    codes, scale, err = quantize(keys)
    return keys, codes, scale, err, la, imp


def test_quantize_bound_holds():
    rng = np.random.default_rng(0)
    keys = _unit(rng, 5000, 384)
    keys[0] = 0.0  # a zero row: scale 1, codes 0, err 0
    codes, scale, err = quantize(keys, chunk=1024)
    res = np.linalg.norm(keys.astype(np.float64) - scale.astype(np.float64)[:, None] * codes, axis=1)
    assert (err >= res).all()
    assert np.abs(codes).max() <= 127 and codes.dtype == np.int8
    assert err[1:].mean() < 0.02  # ~1/254 of the largest element per coordinate: tight enough to prune


@pytest.mark.parametrize("backend", ["cpu", "torch"])
def test_bounded_equals_rerank(backend):
    rng = np.random.default_rng(1)
    for trial in range(40):
        n = int(rng.integers(1, 2500))
        d = int(rng.choice([5, 16, 33, 384]))
        keys, codes, scale, err, la, imp = _case(rng, n, d, ties=trial % 3 == 0, same_time=trial % 4 == 0)
        q = _unit(rng, int(rng.integers(1, 4)), d)
        cand = np.sort(rng.choice(n, int(rng.integers(1, n + 1)), replace=False)).astype(np.int64)
        if trial % 5 == 0:
            cand[::7] = -1  # padding
        k = int(rng.integers(1, 25))
        w = tuple(float(x) for x in rng.choice([0.0, 0.5, 1.0, 2.0], 3))
        if w == (0.0, 0.0, 0.0):
            w = (0.0, 1.0, 0.0)
        want = api.memory_rerank(q, keys, la, imp, cand, k, 1e6, w, backend=backend)
        rows, scores, exact_rows = api.memory_rerank_bounded(q, keys, codes, scale, err, la, imp, cand, k, 1e6, w,
                                                             backend=backend)
        np.testing.assert_array_equal(rows, want[0], err_msg=f"trial {trial}")
        np.testing.assert_array_equal(scores, want[1], err_msg=f"trial {trial}")
        assert 0 <= exact_rows <= len(q) * len(cand)


def test_bounded_scores_few_rows_exactly():
    """On a large scan the codes rule out almost every row (the point of the bounded scan)."""
    rng = np.random.default_rng(2)
    keys, codes, scale, err, la, imp = _case(rng, 50_000, 384)
    q = _unit(rng, 2, 384)
    rows, _, exact_rows = api.memory_rerank_bounded(q, keys, codes, scale, err, la, imp, np.arange(50_000), 10,
                                                    1e6, (0.0, 1.0, 0.0), backend="cpu")
    assert exact_rows < 0.01 * 2 * 50_000
    want = api.memory_rerank(q, keys, la, imp, np.arange(50_000), 10, 1e6, (0.0, 1.0, 0.0), backend="cpu")
    np.testing.assert_array_equal(rows, want[0])


def test_bounded_bad_input():
    rng = np.random.default_rng(3)
    keys, codes, scale, err, la, imp = _case(rng, 100, 8)
    q = _unit(rng, 2, 8)
    with pytest.raises(ValueError, match="shared list"):
        api.memory_rerank_bounded(q, keys, codes, scale, err, la, imp, np.zeros((2, 5), np.int64), 3, 0.0)
    with pytest.raises(ValueError, match="codes"):
        api.memory_rerank_bounded(q, keys, codes.astype(np.int16), scale, err, la, imp, np.arange(10), 3, 0.0)
    with pytest.raises(ValueError, match="scale"):
        api.memory_rerank_bounded(q, keys, codes, scale[:50], err, la, imp, np.arange(10), 3, 0.0)
    with pytest.raises(ValueError, match="k"):
        api.memory_rerank_bounded(q, keys, codes, scale, err, la, imp, np.arange(10), 0, 0.0)
    from metacog_fast._backend import core

    with pytest.raises(ValueError, match="codes"):  # the compiled boundary checks too
        core().memory_rerank_bounded(q, keys, codes[:50], scale, err, la, imp, np.arange(10), 3, 0.0, 1.0, 1.0, 1.0,
                                     0.995, 3600.0)
