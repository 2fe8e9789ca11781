"""Triton glue of the scoring op (docs/design.md §1.3): ``score_layers`` and ``mean_pool_l2norm``
with the names and arguments of :mod:`metacog_fast.ops.scoring.naive`, on contiguous fp32 tensors.

One kernel per MLP layer: ``y = act(x @ W[:, :K1]^T (+ t @ W[:, K1:]^T) + b)``.
Layer 0 reads the traj and task halves of ``l0.w`` in place (the concat is never
materialised); a single task row is broadcast with a row stride of 0. fp32
accumulation, ``input_precision="ieee"`` so GPU results match the fp32 reference
(no TF32). Runs on the CPU interpreter with ``TRITON_INTERPRET=1``.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"

ACT_SILU = 0
ACT_SIGMOID = 1


@triton.jit
def _layer_kernel(
    x_ptr, t_ptr, w_ptr, b_ptr, y_ptr,
    B, K1, K2, N, ldw, t_row_stride,
    HAS_T: tl.constexpr, ACT: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_b = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_b * BLOCK_B + tl.arange(0, BLOCK_B)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < B
    cmask = cols < N
    acc = tl.zeros((BLOCK_B, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K1, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        kmask = ks < K1
        x = tl.load(x_ptr + rows[:, None] * K1 + ks[None, :], mask=rmask[:, None] & kmask[None, :], other=0.0)
        w = tl.load(w_ptr + cols[None, :] * ldw + ks[:, None], mask=cmask[None, :] & kmask[:, None], other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    if HAS_T:
        for k0 in range(0, K2, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            kmask = ks < K2
            t = tl.load(t_ptr + rows[:, None] * t_row_stride + ks[None, :],
                        mask=rmask[:, None] & kmask[None, :], other=0.0)
            w = tl.load(w_ptr + cols[None, :] * ldw + K1 + ks[:, None],
                        mask=cmask[None, :] & kmask[:, None], other=0.0)
            acc += tl.dot(t, w, input_precision="ieee")
    bias = tl.load(b_ptr + cols, mask=cmask, other=0.0)
    acc += bias[None, :]
    if ACT == 0:
        acc = acc * tl.sigmoid(acc)
    else:
        acc = tl.sigmoid(acc)
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], acc, mask=rmask[:, None] & cmask[None, :])


@triton.jit
def _pool_kernel(x_ptr, m_ptr, y_ptr, T, D, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    b = tl.program_id(0)
    ds = tl.arange(0, BLOCK_D)
    dmask = ds < D
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    msum = tl.zeros((BLOCK_T,), dtype=tl.float32)
    for t0 in range(0, T, BLOCK_T):
        ts = t0 + tl.arange(0, BLOCK_T)
        tmask = ts < T
        m = tl.load(m_ptr + b * T + ts, mask=tmask, other=0.0)
        x = tl.load(x_ptr + b * T * D + ts[:, None] * D + ds[None, :],
                    mask=tmask[:, None] & dmask[None, :], other=0.0)
        acc += tl.sum(x * m[:, None], axis=0)
        msum += m
    count = tl.maximum(tl.sum(msum, axis=0), 1e-9)
    acc = acc / count
    norm = tl.sqrt(tl.sum(acc * acc, axis=0))
    acc = acc / tl.maximum(norm, 1e-12)
    tl.store(y_ptr + b * D + ds, acc, mask=dmask)


def _linear_act(x: torch.Tensor, t: torch.Tensor | None, w: torch.Tensor, b: torch.Tensor, act: int) -> torch.Tensor:
    B, K1 = x.shape
    N = w.shape[0]
    K2 = 0 if t is None else t.shape[1]
    y = torch.empty((B, N), dtype=torch.float32, device=x.device)
    if _INTERPRET:
        # The CPU interpreter runs programs one by one: few large blocks are far faster.
        BLOCK_B, BLOCK_K = 64, 128
        BLOCK_N = max(16, min(256, triton.next_power_of_2(N)))
    else:
        BLOCK_B, BLOCK_K = 16, 32
        BLOCK_N = 16 if N <= 16 else 64
    t_stride = 0 if (t is None or t.shape[0] == 1) else K2
    grid = (triton.cdiv(B, BLOCK_B), triton.cdiv(N, BLOCK_N))
    _layer_kernel[grid](
        x, x if t is None else t, w, b, y,
        B, K1, K2, N, w.shape[1], t_stride,
        HAS_T=t is not None, ACT=act, BLOCK_B=BLOCK_B, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
    )
    return y


def score_layers(task_emb: torch.Tensor, traj_emb: torch.Tensor,
                 layers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """p [B] from task_emb [B or 1, Dta], traj_emb [B, Dtr] and the (w, b) layers (fp32, contiguous)."""
    x = _linear_act(traj_emb, task_emb, layers[0][0], layers[0][1],
                    ACT_SIGMOID if len(layers) == 1 else ACT_SILU)
    for k, (w, b) in enumerate(layers[1:], start=1):
        x = _linear_act(x, None, w, b, ACT_SIGMOID if k == len(layers) - 1 else ACT_SILU)
    return x[:, 0]


def mean_pool_l2norm(token_emb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, D] from token_emb [B, T, D] and mask [B, T] (fp32, contiguous)."""
    B, T, D = token_emb.shape
    y = torch.empty((B, D), dtype=torch.float32, device=token_emb.device)
    if B == 0:
        return y
    block_t = 64 if _INTERPRET else 8
    _pool_kernel[(B,)](token_emb, mask, y, T, D, BLOCK_T=block_t, BLOCK_D=triton.next_power_of_2(D))
    return y
