"""The encoder op (metacog_fast/ops/encoder/, the int8 MiniLM's W8A8 steps): every compiled kernel
against its torch reference (naive.py) on odd shapes, the unchecked fast path included.

Tolerances (float32): quantisation exact (codes may differ by 1 where ``(x - zero) / scale`` lies
within rounding of a .5 tie); dequantisation, GELU and LayerNorm 1e-5 relative to the values'
magnitude; attention 1e-5 on the float32 path, 2e-2 on the AVX512-BF16 path (Q, K, V and the
probabilities rounded to bfloat16, as a bf16 GEMM does). Inference only: the encoder is frozen, so
these kernels have no gradients to compare.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import metacog_fast
from metacog_fast.ops import encoder as K
from metacog_fast.ops.encoder import naive as R

CORE = metacog_fast.core() if metacog_fast.core_built() else None
needs_core = pytest.mark.skipif(CORE is None, reason="compiled core not built")
ROWS = [1, 3, 63, 257]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _dequant_inputs(M: int, N: int, seed: int):
    g = _gen(seed)
    acc = torch.randint(-300_000, 300_000, (M, N), dtype=torch.int32, generator=g)
    scale = torch.rand(M, generator=g) * 0.05 + 1e-3
    zero = torch.randn(M, generator=g)
    w_scale = torch.rand(N, generator=g) * 1e-3 + 1e-5
    w_colsum = torch.randn(N, generator=g) * 0.1
    bias = torch.randn(N, generator=g)
    return acc, scale, zero, w_scale, w_colsum, bias


def _close(a: torch.Tensor, b: torch.Tensor, rel: float) -> None:
    tol = rel * max(1.0, float(b.abs().max()))
    assert float((a - b).abs().max()) <= tol, (float((a - b).abs().max()), tol)


def _same_codes(a: torch.Tensor, b: torch.Tensor, frac: float = 1e-3) -> None:
    """Codes equal but for +-1 at rounding ties; ``frac``: the share allowed to differ (larger when
    the quantised values come out of a float computation that may differ by an ulp)."""
    d = (a.int() - b.int()).abs()
    assert int(d.max()) <= 1
    assert float((d > 0).float().mean()) <= frac


@needs_core
@pytest.mark.parametrize("M", ROWS)
@pytest.mark.parametrize("K_", [384, 37])
def test_quantize_rows_matches_reference(M, K_):
    x = torch.randn(M, K_, generator=_gen(M + K_)) * 3 + 0.5
    q, s, z = K.quantize_rows(x, backend="cpu")
    rq, rs, rz = R.quantize_rows(x)
    assert q.dtype == torch.int8 and q.shape == (M, K_)
    _same_codes(q, rq)
    torch.testing.assert_close(s, rs, rtol=1e-6, atol=0)
    torch.testing.assert_close(z, rz, rtol=1e-6, atol=1e-7)
    # The whole int8 range is used, and the codes reconstruct x to half a step.
    assert int(q.min()) == -128 and int(q.max()) == 127
    assert bool(((s[:, None] * q.float() + z[:, None] - x).abs() <= 0.5 * s[:, None] * (1 + 1e-4)).all())


@needs_core
def test_quantize_constant_row():
    x = torch.full((2, 20), 1.5)
    q, s, z = K.quantize_rows(x, backend="cpu")
    assert int(q.abs().max()) == 0 and float(s[0]) == 1.0 and float(z[0]) == 1.5


@needs_core
@pytest.mark.parametrize("M", ROWS)
@pytest.mark.parametrize("N", [1536, 45])
@pytest.mark.parametrize("gelu", [False, True])
def test_dequantize_rows_matches_reference(M, N, gelu):
    args = _dequant_inputs(M, N, M * N)
    _close(K.dequantize_rows(*args, gelu=gelu, backend="cpu"), R.dequantize_rows(*args, gelu=gelu), 1e-5)


@needs_core
@pytest.mark.parametrize("M", ROWS)
def test_dequantize_gelu_quantize_matches_reference(M):
    args = _dequant_inputs(M, 1536, M)
    q, s, z = K.dequantize_gelu_quantize(*args, backend="cpu")
    rq, rs, rz = R.dequantize_gelu_quantize(*args)
    _same_codes(q, rq, 1e-2)
    torch.testing.assert_close(s, rs, rtol=1e-5, atol=0)
    torch.testing.assert_close(z, rz, rtol=1e-5, atol=1e-6)


@needs_core
@pytest.mark.parametrize("M", ROWS)
@pytest.mark.parametrize("N", [384, 45])
def test_dequantize_add_layernorm_matches_reference(M, N):
    args = _dequant_inputs(M, N, M + N)
    g = _gen(7)
    residual = torch.randn(M, N, generator=g)
    gamma, beta = torch.rand(N, generator=g) + 0.5, torch.randn(N, generator=g)
    expect, (rq, rs, rz) = R.dequantize_add_layernorm(*args, residual, gamma, beta, 1e-12)
    res = residual.clone()
    q, s, z = K.dequantize_add_layernorm(*args, res, gamma, beta, 1e-12, backend="cpu")
    _close(res, expect, 1e-5)  # updated in place
    _same_codes(q, rq, 1e-2)
    torch.testing.assert_close(s, rs, rtol=1e-5, atol=0)


def _attn_tol() -> float:
    return 2e-2 if CORE is not None and CORE.selected_isa() == "avx512_bf16" else 1e-5


@needs_core
@pytest.mark.parametrize("B,T", [(1, 1), (3, 3), (3, 63), (2, 257)])
@pytest.mark.parametrize("heads,d", [(12, 32), (2, 24), (3, 16)])
def test_attention_matches_reference(B, T, heads, d):
    qkv = torch.randn(B, T, 3 * heads * d, generator=_gen(B * T + d))
    lengths = torch.tensor([T, max(1, T // 2), 1][:B], dtype=torch.int64)
    out = K.attention(qkv, lengths, heads, backend="cpu")
    ref = R.attention(qkv, lengths, heads)
    tol = _attn_tol() if d % 32 == 0 else 1e-5  # the bf16 path needs d % 32 == 0
    assert float((out - ref).abs().max()) <= tol


@needs_core
def test_attention_float32_path_on_every_isa():
    """Each compiled ISA path against the reference (the bf16 one at its looser tolerance)."""
    qkv = torch.randn(3, 63, 3 * 12 * 32, generator=_gen(1))
    lengths = torch.tensor([63, 40, 1])
    ref = R.attention(qkv, lengths, 12)
    before = CORE.selected_isa()
    try:
        for isa in CORE.build_info()["isa_supported"]:
            CORE.set_isa(isa)
            out = K.attention(qkv, lengths, 12, backend="cpu")
            tol = 2e-2 if isa == "avx512_bf16" else 1e-5
            assert float((out - ref).abs().max()) <= tol, isa
            q, _, _ = K.quantize_rows(qkv[0], backend="cpu")
            _same_codes(q, R.quantize_rows(qkv[0])[0])
    finally:
        CORE.set_isa(before)


def test_torch_backend_is_the_reference():
    x = torch.randn(5, 16, generator=_gen(3))
    for a, b in zip(K.quantize_rows(x, backend="torch"), R.quantize_rows(x)):
        assert torch.equal(a, b)


@needs_core
def test_bad_input_names_the_argument():
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match="x: expected dtype torch.float32"):
        K.quantize_rows(x.double())
    with pytest.raises(ValueError, match=r"x: expected shape \[\*, \*\]"):
        K.quantize_rows(x[0])
    bad = x.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="x: contains NaN"):
        K.quantize_rows(bad)
    args = list(_dequant_inputs(4, 8, 0))
    with pytest.raises(ValueError, match=r"w_scale: expected shape \[8\]"):
        K.dequantize_rows(args[0], args[1], args[2], args[3][:5], args[4], args[5])
    with pytest.raises(TypeError, match="acc: expected dtype torch.int32"):
        K.dequantize_rows(args[0].float(), *args[1:])
    qkv = torch.randn(2, 5, 3 * 4 * 8)
    with pytest.raises(ValueError, match="lengths: expected values in 1..5"):
        K.attention(qkv, torch.tensor([5, 0]), 4)
    with pytest.raises(ValueError, match="heads"):
        K.attention(qkv, torch.tensor([5, 5]), 5)
    with pytest.raises(ValueError, match="residual: expected a contiguous"):
        K.dequantize_add_layernorm(*args, torch.randn(8, 4).t(), torch.ones(8), torch.zeros(8), 1e-12)
    with pytest.raises(ValueError, match="eps"):
        K.dequantize_add_layernorm(*args, torch.randn(4, 8), torch.ones(8), torch.zeros(8), 0.0)
