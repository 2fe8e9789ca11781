"""Kernels of the int8 MiniLM encoder (``EncoderConfig(precision="int8")``, W8A8).

Everything between two int8 GEMMs (``torch._int_mm``) in one pass over the rows:

* ``quantize_rows(x)``                          x [M, K] -> (q int8 [M, K], scale [M], zero [M])
* ``dequantize_rows(acc, ..., gelu)``           acc int32 [M, N] -> float32 [M, N]
* ``dequantize_gelu_quantize(acc, ...)``        the FFN's middle, -> (q, scale, zero)
* ``dequantize_add_layernorm(acc, ..., residual, gamma, beta, eps)``
                                                 residual <- LN(dequantized + residual), -> (q, scale, zero)
* ``attention(qkv, lengths, heads)``            qkv [B, T, 3*H*d] -> [B, T, H*d]

The quantisation scheme and the readable versions: :mod:`metacog_fast.ops.encoder.naive`.
Backends (one dispatch table): ``"cpu"`` (:mod:`.cpu`, the compiled core, AVX2/AVX-512
dispatched at run time) and ``"torch"`` (:mod:`.naive`); ``"auto"`` takes cpu when the core is
built. CPU tensors only; inference only.

Fast path: ``check=False`` skips the dtype / shape / NaN checks below (the compiled core still
checks dtypes and shapes at its boundary). :class:`metacog_fast.scoring.int8_bert.Int8Bert`
resolves its backend once and calls every step that way: its tensors come from its own GEMMs.
"""
from __future__ import annotations

import operator

import torch

from metacog_fast.ops._dispatch import DispatchTable
from metacog_fast.ops.encoder import naive

TABLE = DispatchTable("encoder", {"cpu": "metacog_fast.ops.encoder.cpu", "torch": "metacog_fast.ops.encoder.naive"})

Quantized = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _check(t: object, name: str, dtype: torch.dtype, shape: tuple[int, ...], finite: bool = False) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype:
        raise TypeError(f"{name}: expected dtype {dtype}, got {t.dtype}")
    if t.device.type != "cpu":
        raise ValueError(f"{name}: expected a CPU tensor, got one on {t.device}")
    if t.dim() != len(shape) or any(s >= 0 and t.shape[i] != s for i, s in enumerate(shape)):
        want = "[" + ", ".join("*" if s < 0 else str(s) for s in shape) + "]"
        raise ValueError(f"{name}: expected shape {want}, got {list(t.shape)}")
    if finite and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return t.contiguous()


def _check_dequant(acc, scale, zero, w_scale, w_colsum, bias) -> tuple[torch.Tensor, ...]:
    acc = _check(acc, "acc", torch.int32, (-1, -1))
    M, N = acc.shape
    return (acc, _check(scale, "scale", torch.float32, (M,), True), _check(zero, "zero", torch.float32, (M,), True),
            _check(w_scale, "w_scale", torch.float32, (N,), True), _check(w_colsum, "w_colsum", torch.float32, (N,), True),
            _check(bias, "bias", torch.float32, (N,), True))


def quantize_weight(w: torch.Tensor, *, check: bool = True) -> Quantized:
    """W [N, K] (a floating tensor) -> (Wq^T int8 [K, N], w_scale [N], w_colsum [N]): per output row,
    symmetric (see :func:`metacog_fast.ops.encoder.naive.quantize_weight`)."""
    if check:
        if not isinstance(w, torch.Tensor):
            raise TypeError(f"w: expected a torch.Tensor, got {type(w).__name__}")
        if not w.is_floating_point():
            raise TypeError(f"w: expected a floating dtype, got {w.dtype}")
        if w.dim() != 2:
            raise ValueError(f"w: expected shape [N, K], got {list(w.shape)}")
        if not bool(torch.isfinite(w).all()):
            raise ValueError("w: contains NaN or infinite values")
    return naive.quantize_weight(w)


def quantize_rows(x: torch.Tensor, backend: str = "auto", *, check: bool = True) -> Quantized:
    """(q int8 [M, K], scale [M], zero [M]) with x [M, K] ~ scale * q + zero per row."""
    if check:
        x = _check(x, "x", torch.float32, (-1, -1), True)
    return TABLE(backend).quantize_rows(x)


def dequantize_rows(acc: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, w_scale: torch.Tensor,
                    w_colsum: torch.Tensor, bias: torch.Tensor, gelu: bool = False, backend: str = "auto", *,
                    check: bool = True) -> torch.Tensor:
    """float32 [M, N] = acc * (scale[m] * w_scale[n]) + zero[m] * w_colsum[n] + bias[n], then GELU if asked."""
    args = _check_dequant(acc, scale, zero, w_scale, w_colsum, bias) if check else (acc, scale, zero, w_scale,
                                                                                    w_colsum, bias)
    return TABLE(backend).dequantize_rows(*args, gelu=bool(gelu))


def dequantize_gelu_quantize(acc: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, w_scale: torch.Tensor,
                             w_colsum: torch.Tensor, bias: torch.Tensor, backend: str = "auto", *,
                             check: bool = True) -> Quantized:
    """quantize_rows(GELU(dequantize_rows(...))) without the float32 intermediate."""
    args = _check_dequant(acc, scale, zero, w_scale, w_colsum, bias) if check else (acc, scale, zero, w_scale,
                                                                                    w_colsum, bias)
    return TABLE(backend).dequantize_gelu_quantize(*args)


def dequantize_add_layernorm(acc: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, w_scale: torch.Tensor,
                             w_colsum: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, gamma: torch.Tensor,
                             beta: torch.Tensor, eps: float, backend: str = "auto", *,
                             check: bool = True) -> Quantized:
    """``residual`` [M, N] (float32, contiguous) <- LayerNorm(dequantized acc + residual) * gamma + beta,
    in place; returns quantize_rows of the result."""
    if check:
        args = _check_dequant(acc, scale, zero, w_scale, w_colsum, bias)
        M, N = args[0].shape
        if not isinstance(residual, torch.Tensor) or not residual.is_contiguous():
            raise ValueError("residual: expected a contiguous float32 torch.Tensor (it is updated in place)")
        _check(residual, "residual", torch.float32, (M, N), True)
        gamma = _check(gamma, "gamma", torch.float32, (N,), True)
        beta = _check(beta, "beta", torch.float32, (N,), True)
        if not float(eps) > 0:
            raise ValueError(f"eps: expected a positive number, got {eps}")
    else:
        args = (acc, scale, zero, w_scale, w_colsum, bias)
    x, quant = TABLE(backend).dequantize_add_layernorm(*args, residual, gamma, beta, float(eps))
    if x is not residual:  # the reference returns a new tensor; the compiled kernel wrote residual
        residual.copy_(x)
    return quant


def attention(qkv: torch.Tensor, lengths: torch.Tensor, heads: int, backend: str = "auto", *,
              check: bool = True) -> torch.Tensor:
    """BERT self-attention: qkv [B, T, 3*H*d] float32, lengths [B] int64 (1..T real tokens; keys past
    them are masked) -> [B, T, H*d]."""
    if check:
        qkv = _check(qkv, "qkv", torch.float32, (-1, -1, -1), True)
        B, T, C = qkv.shape
        try:
            heads = operator.index(heads)  # an int or a numpy integer, not 2.0 or "2"
        except TypeError:
            raise TypeError(f"heads: expected an int, got {type(heads).__name__}") from None
        if heads < 1 or C % (3 * heads):
            raise ValueError(f"heads: qkv's last axis ({C}) must be 3 * heads * head_dim, got heads={heads}")
        lengths = _check(lengths, "lengths", torch.int64, (B,))
        if B and (int(lengths.min()) < 1 or int(lengths.max()) > T):
            raise ValueError(f"lengths: expected values in 1..{T} (the axis T of qkv), got {lengths.tolist()}")
    return TABLE(backend).attention(qkv, lengths, int(heads))
