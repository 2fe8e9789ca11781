"""Torch reference of the int8 MiniLM encoder's kernels (``precision="int8"``, W8A8).

Pure functions, written for reading; the compiled path (``csrc/cpu/encoder.cpp``) is tested
against them. Inference only: the encoder is frozen (MUSE trains g_eta on its embeddings), so
there are no gradients to define.

Quantisation scheme (all float32 unless stated):

* weights: per output channel, symmetric: ``W[n, k] ~ w_scale[n] * Wq[n, k]``, Wq int8 in
  [-127, 127]; the GEMM takes ``Wq^T`` [K, N];
* activations: per row (token), asymmetric: ``x[m, k] ~ scale[m] * q[m, k] + zero[m]`` with
  ``scale = (max - min) / 255``, ``zero = (max + min) / 2``, q int8 in [-128, 127] (the whole
  range is used, which matters for GELU outputs, all >= -0.17);
* product: ``x @ W^T ~ scale[m] * w_scale[n] * (q @ Wq^T)[m, n] + zero[m] * w_colsum[n]`` with
  ``w_colsum[n] = w_scale[n] * sum_k Wq[n, k]``; ``q @ Wq^T`` is exact in int32.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """W [N, K] -> (Wq^T int8 [K, N], w_scale [N], w_colsum [N]); Wq^T is the transposed view of the
    contiguous [N, K] matrix (oneDNN's int8 GEMM is as fast or faster with it than with a copy)."""
    w = w.detach().float()
    w_scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0
    wq = torch.round(w / w_scale[:, None]).clamp(-127, 127).to(torch.int8)
    w_colsum = w_scale * wq.sum(dim=1, dtype=torch.int64).float()
    return wq.t(), w_scale, w_colsum


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, K] -> (q int8 [M, K], scale [M], zero [M]), x ~ scale * q + zero per row."""
    lo, hi = x.amin(dim=1), x.amax(dim=1)
    scale = (hi - lo) / 255.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # a constant row: q = 0
    zero = (hi + lo) * 0.5
    q = torch.round((x - zero[:, None]) * (1.0 / scale)[:, None]).clamp(-128, 127).to(torch.int8)
    return q, scale, zero


def dequantize_rows(acc: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, w_scale: torch.Tensor,
                    w_colsum: torch.Tensor, bias: torch.Tensor, gelu: bool = False) -> torch.Tensor:
    """acc int32 [M, N] (= q @ Wq^T) -> float32 [M, N]: the linear layer's output, then GELU if asked."""
    y = acc.float() * (scale[:, None] * w_scale[None, :]) + (zero[:, None] * w_colsum[None, :] + bias[None, :])
    return F.gelu(y) if gelu else y


def dequantize_gelu_quantize(acc: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, w_scale: torch.Tensor,
                             w_colsum: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The FFN's middle: quantize_rows(GELU(dequantized acc))."""
    return quantize_rows(dequantize_rows(acc, scale, zero, w_scale, w_colsum, bias, gelu=True))


def dequantize_add_layernorm(acc: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, w_scale: torch.Tensor,
                             w_colsum: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor, gamma: torch.Tensor,
                             beta: torch.Tensor, eps: float) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """BERT's post-LN residual block end: x = LayerNorm(dequantized acc + residual); returns
    (x [M, N], quantize_rows(x)). The compiled kernel writes x into ``residual``."""
    x = F.layer_norm(dequantize_rows(acc, scale, zero, w_scale, w_colsum, bias) + residual, (acc.shape[1],),
                     gamma, beta, eps)
    return x, quantize_rows(x)


def attention(qkv: torch.Tensor, lengths: torch.Tensor, heads: int) -> torch.Tensor:
    """Self-attention of BERT: qkv [B, T, 3*H*d] (Q, K, V blocks of H*d), lengths [B] (real tokens;
    keys past them are masked, every query row is computed) -> [B, T, H*d]."""
    B, T, C = qkv.shape
    d = C // (3 * heads)
    q, k, v = qkv.view(B, T, 3, heads, d).permute(2, 0, 3, 1, 4)  # [B, H, T, d] each
    s = (q * (1.0 / math.sqrt(d))) @ k.transpose(-1, -2)
    keep = torch.arange(T, device=qkv.device)[None, :] < lengths[:, None]  # [B, T] keys
    s = s.masked_fill(~keep[:, None, None, :], float("-inf"))
    return (s.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, heads * d)
