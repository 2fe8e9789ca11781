"""Every op's unchecked fast path (``check=False``) computes exactly what its checked API does, on
every backend of this build and odd batches (1, 3, 63, 257); the dispatch tables refuse what they
do not have; the self-assessment needs no stochastic layout.

Exact equality (same backend, same inputs: the fast path only skips checks)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import metacog_fast
from metacog_fast.kernels import (
    dequantize_add_layernorm,
    dequantize_gelu_quantize,
    dequantize_rows,
    init_rssm_weights,
    init_scoring_head,
    mean_pool_l2norm,
    memory_rerank,
    memory_scores,
    quantize_rows,
    rssm_imagine,
    rssm_img_step,
    rssm_obs_step,
    score_trajectories,
    self_assess,
    self_regulate,
)
from metacog_fast.ops._dispatch import DispatchTable
from metacog_fast.ops.rssm import naive

CPU = ["cpu"] if metacog_fast.core_built() else []
BATCHES = [1, 3, 63, 257]


def _equal(a, b) -> None:
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _equal(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", ["torch", *CPU])
@pytest.mark.parametrize("B", BATCHES)
def test_rssm_unchecked_equals_checked(backend, B):
    w = init_rssm_weights(None, D=24, Hd=20, S=3, C=5, A=2, E=7, L=2, N=3, seed=1)
    rng = np.random.default_rng(B)
    h = rng.standard_normal((B, 24)).astype(np.float32)
    z = np.zeros((B, 15), np.float32)
    z[np.arange(B), rng.integers(0, 15, B)] = 1
    a = np.tanh(rng.standard_normal((B, 2))).astype(np.float32)
    e = rng.standard_normal((B, 7)).astype(np.float32)
    u = rng.random((B, 3), dtype=np.float32)
    eps = rng.standard_normal((3, B, 2)).astype(np.float32)
    uu = rng.random((2, B, 3), dtype=np.float32)
    s = np.concatenate([h, z], 1)
    calls = [
        lambda ck: rssm_img_step(w, h, z, a, u, backend=backend, check=ck),
        lambda ck: rssm_obs_step(w, h, z, a, e, u, backend=backend, check=ck),
        lambda ck: rssm_imagine(w, h, z, 2, eps[:2], uu, backend=backend, check=ck),
        lambda ck: self_assess(w, s, grad=True, backend=backend, check=ck),
        lambda ck: self_regulate(w, h, None, 2, 0.1, eps, u, trace=True, backend=backend, check=ck),
    ]
    for f in calls:
        _equal(f(False), f(True))


@pytest.mark.parametrize("backend", ["torch", *CPU])
def test_self_assess_needs_no_layout(backend):
    """Z = 3 x 5 = 15 is no multiple of 32: the self-assessment never splits z, so it runs without
    ``classes`` and gives what the reference gives."""
    w = init_rssm_weights(None, D=24, Hd=20, S=3, C=5, A=2, E=7, L=1, N=3, seed=2)
    s = np.random.default_rng(0).standard_normal((3, 24 + 15)).astype(np.float32)
    psi = self_assess(w, s, backend=backend)
    want = naive.self_assess({k: torch.from_numpy(v) for k, v in w.items()}, torch.from_numpy(s))
    np.testing.assert_allclose(psi, want.numpy(), atol=2e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="classes"):
        self_assess(w, s, classes=4, backend=backend)


@pytest.mark.parametrize("backend", ["torch", *CPU])
@pytest.mark.parametrize("B", BATCHES)
def test_scoring_unchecked_equals_checked(backend, B):
    head = init_scoring_head(in_dim=2 * 37, hidden=(19,), seed=3)
    g = torch.Generator().manual_seed(B)
    traj, task = torch.randn(B, 37, generator=g), torch.randn(1, 37, generator=g)
    _equal(score_trajectories(task, traj, head, backend, check=False), score_trajectories(task, traj, head, backend))
    x, m = torch.randn(B, 5, 11, generator=g), (torch.rand(B, 5, generator=g) > 0.3).float()
    _equal(mean_pool_l2norm(x, m, backend, check=False), mean_pool_l2norm(x, m, backend))


@pytest.mark.parametrize("backend", ["torch", *CPU])
@pytest.mark.parametrize("M", BATCHES)
def test_encoder_unchecked_equals_checked(backend, M):
    g = torch.Generator().manual_seed(M)
    x = torch.randn(M, 45, generator=g)
    _equal(quantize_rows(x, backend, check=False), quantize_rows(x, backend))
    acc = torch.randint(-30_000, 30_000, (M, 45), dtype=torch.int32, generator=g)
    scale, zero = torch.rand(M, generator=g) * 0.05 + 1e-3, torch.randn(M, generator=g)
    ws, cs, b = torch.rand(45, generator=g) * 1e-3 + 1e-5, torch.randn(45, generator=g), torch.randn(45, generator=g)
    args = (acc, scale, zero, ws, cs, b)
    _equal(dequantize_rows(*args, True, backend, check=False), dequantize_rows(*args, True, backend))
    _equal(dequantize_gelu_quantize(*args, backend, check=False), dequantize_gelu_quantize(*args, backend))
    r1, r2 = torch.randn(M, 45, generator=g), None
    r2 = r1.clone()
    q1 = dequantize_add_layernorm(*args, r1, torch.ones(45), torch.zeros(45), 1e-12, backend, check=False)
    q2 = dequantize_add_layernorm(*args, r2, torch.ones(45), torch.zeros(45), 1e-12, backend)
    _equal(q1, q2)
    assert torch.equal(r1, r2)


@pytest.mark.parametrize("backend", ["torch", *CPU])
@pytest.mark.parametrize("Q", BATCHES)
def test_memory_unchecked_equals_checked(backend, Q):
    rng = np.random.default_rng(Q)
    keys = rng.standard_normal((50, 9)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    q = keys[rng.integers(0, 50, Q)] + 0.1
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    la, imp = rng.uniform(0, 7200, 50), rng.uniform(1, 10, 50).astype(np.float32)
    cand = rng.integers(-1, 50, 12).astype(np.int64)
    args = (q, keys, la, imp, cand)
    _equal(memory_scores(*args, 3600.0, backend=backend, check=False), memory_scores(*args, 3600.0, backend=backend))
    _equal(memory_rerank(*args, 4, 3600.0, backend=backend, check=False),
           memory_rerank(*args, 4, 3600.0, backend=backend))


def test_dispatch_table_names_what_it_lacks():
    t = DispatchTable("demo", {"torch": "metacog_fast.ops.memory.naive"})
    with pytest.raises(metacog_fast.BackendUnavailable, match="backend='cpu' is not implemented"):
        t("cpu")
    with pytest.raises(ValueError, match="backend: expected one of"):
        t("gpu")
    assert t("torch").memory_scores is not None
    broken = DispatchTable("demo", {"torch": "metacog_fast.ops.no_such_module"})
    with pytest.raises(metacog_fast.BackendUnavailable, match="cannot import metacog_fast.ops.no_such_module"):
        broken.impl("torch")


def test_cuda_glue_imports_without_triton():
    """The CUDA glue shares its packing with Triton's through ops/rssm/pack.py, not the Triton file."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['triton'] = None; import metacog_fast.ops.rssm.cuda as c; "
            "assert 'metacog_fast.ops.rssm.triton' not in sys.modules; print(c.W_COUNT)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "35"
