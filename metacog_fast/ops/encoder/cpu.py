"""CPU glue of the encoder op: ``metacog_fast._core.enc_*`` (csrc/cpu/encoder.cpp, per-ISA,
OpenMP over rows, the GIL released).

Same names, arguments and results as :mod:`metacog_fast.ops.encoder.naive`, on CPU torch tensors
(shared memory both ways: ``tensor.numpy()`` / ``torch.from_numpy``). The compiled functions check
dtypes, layouts and shapes themselves, naming the argument.
"""
from __future__ import annotations

import torch

from metacog_fast._backend import core

Quantized = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _quantized(out) -> Quantized:
    q, s, z = out
    return torch.from_numpy(q), torch.from_numpy(s), torch.from_numpy(z)


def quantize_rows(x: torch.Tensor) -> Quantized:
    """x [M, K] float32 -> (q int8 [M, K], scale [M], zero [M])."""
    return _quantized(core().enc_quantize_rows(x.numpy()))


def dequantize_rows(acc: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, w_scale: torch.Tensor,
                    w_colsum: torch.Tensor, bias: torch.Tensor, gelu: bool = False) -> torch.Tensor:
    """acc int32 [M, N] -> float32 [M, N] (GELU if asked)."""
    return torch.from_numpy(core().enc_dequantize_rows(acc.numpy(), scale.numpy(), zero.numpy(), w_scale.numpy(),
                                                       w_colsum.numpy(), bias.numpy(), bool(gelu)))


def dequantize_gelu_quantize(acc: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, w_scale: torch.Tensor,
                             w_colsum: torch.Tensor, bias: torch.Tensor) -> Quantized:
    """quantize_rows(GELU(dequantize_rows(...))) in one pass."""
    return _quantized(core().enc_dequantize_gelu_quantize(acc.numpy(), scale.numpy(), zero.numpy(), w_scale.numpy(),
                                                          w_colsum.numpy(), bias.numpy()))


def dequantize_add_layernorm(acc: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, w_scale: torch.Tensor,
                             w_colsum: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, gamma: torch.Tensor,
                             beta: torch.Tensor, eps: float) -> tuple[torch.Tensor, Quantized]:
    """(x [M, N], quantize_rows(x)) with x = LayerNorm(dequantized acc + residual), written into
    ``residual`` (so x IS ``residual``)."""
    out = core().enc_dequantize_add_layernorm(acc.numpy(), scale.numpy(), zero.numpy(), w_scale.numpy(),
                                              w_colsum.numpy(), bias.numpy(), residual.numpy(), gamma.numpy(),
                                              beta.numpy(), float(eps))
    return residual, _quantized(out)


def attention(qkv: torch.Tensor, lengths: torch.Tensor, heads: int) -> torch.Tensor:
    """qkv [B, T, 3*H*d] float32, lengths [B] int64 -> [B, T, H*d]."""
    return torch.from_numpy(core().enc_attention(qkv.numpy(), lengths.numpy(), int(heads)))
