"""memory_scores / memory_rerank: every backend against the torch reference (docs/design.md §1.4)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from metacog_fast.kernels import memory_rerank, memory_scores
from metacog_fast.ops.memory import naive as ref

BACKENDS = ["cpu", "torch"]
SCORE_ATOL = 2e-6  # float32 dot products of unit vectors vs the float64 reference


def _unit(rng, n, d):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _case(Q, N, C, D=37, seed=0, shared=False):
    rng = np.random.default_rng(seed)
    q, keys = _unit(rng, Q, D), _unit(rng, N, D)
    la = rng.uniform(0, 5e5, N)
    imp = rng.uniform(1, 10, N).astype(np.float32)
    cand = rng.integers(-1, N, C if shared else (Q, C)).astype(np.int64)
    return q, keys, la, imp, cand


def _ref_scores(q, keys, la, imp, cand, now, w=(1.0, 1.0, 1.0)):
    t = torch.from_numpy
    return ref.memory_scores(t(q), t(keys), t(la), t(imp), t(cand), now, w).numpy()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("Q,N,C", [(1, 5, 3), (3, 64, 17), (63, 257, 65), (257, 129, 31)])
def test_scores_match_reference(backend, Q, N, C):
    q, keys, la, imp, cand = _case(Q, N, C)
    w = (0.7, 1.3, 0.4)
    got = memory_scores(q, keys, la, imp, cand, 5e5, w, backend=backend)
    want = _ref_scores(q, keys, la, imp, cand, 5e5, w)
    assert got.shape == (Q, C) and got.dtype == np.float32
    assert np.array_equal(np.isinf(got), cand < 0)
    ok = cand >= 0
    np.testing.assert_allclose(got[ok], want[ok], atol=SCORE_ATOL, rtol=0)


def test_scores_formula_by_hand():
    """One record, worked out by hand: 2 hours old, cos 0.6, importance 7."""
    q = np.array([[1.0, 0.0]], np.float32)
    key = np.array([[0.6, 0.8]], np.float32)
    got = memory_scores(q, key, np.array([0.0]), np.array([7.0], np.float32), np.array([0]), 7200.0)
    want = 0.995**2 + (0.6 + 1) / 2 + 0.7
    assert abs(float(got[0, 0]) - want) < 1e-6


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("Q,N,C,k", [(1, 7, 5, 10), (3, 63, 40, 10), (63, 257, 257, 1), (257, 33, 20, 7)])
@pytest.mark.parametrize("shared", [False, True])
def test_rerank_matches_reference(backend, Q, N, C, k, shared):
    q, keys, la, imp, cand = _case(Q, N, C, seed=Q + C, shared=shared)
    rows, scores = memory_rerank(q, keys, la, imp, cand, k, 4e5, backend=backend)
    full = _ref_scores(q, keys, la, imp, cand, 4e5)
    full = np.broadcast_to(full, (Q, C))
    cand2 = np.broadcast_to(cand, (Q, C))
    assert rows.shape == (Q, k) and scores.shape == (Q, k)
    for i in range(Q):
        best = {}
        for r, s in zip(cand2[i], full[i]):
            if r >= 0:
                best[int(r)] = s
        order = sorted(best.items(), key=lambda t: (-t[1], t[0]))[:k]
        valid = rows[i] >= 0
        assert valid.sum() == len(order)  # distinct valid rows, padded with -1
        np.testing.assert_allclose(scores[i][valid], [s for _, s in order], atol=SCORE_ATOL, rtol=0)
        assert np.all(np.isneginf(scores[i][~valid]))
        # same set up to float ties at the cut
        assert len(set(rows[i][valid].tolist()) ^ {r for r, _ in order}) <= 2 * int(
            np.sum(np.abs(full[i] - order[-1][1]) < 1e-5) if order else 0)


def test_rerank_backends_agree_exactly_on_rows():
    q, keys, la, imp, cand = _case(63, 257, 120, seed=5)
    a = memory_rerank(q, keys, la, imp, cand, 10, 3e5, backend="cpu")
    b = memory_rerank(q, keys, la, imp, cand, 10, 3e5, backend="torch")
    assert (a[0] == b[0]).mean() > 0.99
    np.testing.assert_allclose(a[1], b[1], atol=SCORE_ATOL)


def test_duplicates_count_once():
    q, keys, la, imp, _ = _case(1, 10, 1)
    cand = np.array([[3, 3, 3, 5, -1, 5]], np.int64)
    for be in BACKENDS:
        rows, _ = memory_rerank(q, keys, la, imp, cand, 4, 1e5, backend=be)
        assert sorted(rows[0, :2].tolist()) == [3, 5] and rows[0, 2:].tolist() == [-1, -1]


def test_torch_inputs_accepted():
    q, keys, la, imp, cand = _case(3, 20, 8)
    t = torch.from_numpy
    a = memory_scores(t(q), t(keys), t(la), t(imp), t(cand), 1e5, backend="cpu")
    b = memory_scores(q, keys, la, imp, cand, 1e5, backend="cpu")
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_input(backend):
    q, keys, la, imp, cand = _case(3, 20, 8)
    with pytest.raises(ValueError, match="keys"):
        memory_scores(q, keys[:, :5], la, imp, cand, 0.0, backend=backend)
    with pytest.raises(ValueError, match="last_access"):
        memory_scores(q, keys, la[:5], imp, cand, 0.0, backend=backend)
    with pytest.raises(ValueError, match="candidates"):
        memory_scores(q, keys, la, imp, np.array([[0, 99]] * 3), 0.0, backend=backend)
    with pytest.raises(ValueError, match="candidates"):
        memory_scores(q, keys, la, imp, cand[:2], 0.0, backend=backend)
    with pytest.raises(ValueError, match="k: expected"):
        memory_rerank(q, keys, la, imp, cand, 0, 0.0, backend=backend)
    with pytest.raises(ValueError, match="queries"):
        memory_scores(q[0], keys, la, imp, cand, 0.0, backend=backend)
    bad = q.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        memory_scores(bad, keys, la, imp, cand, 0.0, backend=backend)
    with pytest.raises(TypeError, match="queries"):
        memory_scores(q.astype(str), keys, la, imp, cand, 0.0, backend=backend)


def test_core_checks_buffers_directly():
    """The compiled entry point refuses bad buffers itself (no segfault if called raw)."""
    from metacog_fast import core

    q, keys, la, imp, cand = _case(2, 9, 4)
    with pytest.raises(ValueError, match="last_access"):
        core().memory_scores(q, keys, la.astype(np.float32), imp, cand, 0.0, 1, 1, 1, 0.995, 3600.0)
    with pytest.raises(ValueError, match="candidates"):
        core().memory_rerank(q, keys, la, imp, np.array([0, 9]), 3, 0.0, 1, 1, 1, 0.995, 3600.0)
    with pytest.raises(ValueError, match="candidates"):
        core().memory_rerank(q, keys, la, imp, cand.astype(np.int32), 3, 0.0, 1, 1, 1, 0.995, 3600.0)


@pytest.mark.parametrize("Q", [1, 3])
def test_rerank_threaded_split_path(Q):
    """Few queries with very many candidates run split over threads (and merged): same answer
    as scoring everything and taking the best distinct rows."""
    rng = np.random.default_rng(Q)
    N, D, C, k = 5000, 512, 50_000, 25  # Q*C*D above the kernel's parallel threshold
    q, keys = _unit(rng, Q, D), _unit(rng, N, D)
    la = rng.uniform(0, 5e5, N)
    imp = rng.integers(1, 11, N).astype(np.float32)
    cand = rng.integers(-1, N, (Q, C)).astype(np.int64)  # many repeats across thread chunks
    rows, scores = memory_rerank(q, keys, la, imp, cand, k, 5e5, backend="cpu")
    full = memory_scores(q, keys, la, imp, cand, 5e5, backend="cpu")
    for i in range(Q):
        best: dict[int, float] = {}
        for r, s in zip(cand[i].tolist(), full[i].tolist()):
            if r >= 0:
                best[r] = s
        order = sorted(best.items(), key=lambda t: (-t[1], t[0]))[:k]
        assert rows[i].tolist() == [r for r, _ in order]
        np.testing.assert_array_equal(scores[i], np.array([s for _, s in order], np.float32))
