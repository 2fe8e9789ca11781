"""Triton backend of the RSSM and self-assessment kernels (docs/design.md §1.1, §1.2).

Every public function takes torch tensors already on the right device (the
API in :mod:`metacog_fast.ops.rssm.api` converts and validates user
input) and a weight mapping ``w`` of docs/design.md §1.1 names to float32 tensors.

Design: batch rows are independent in every operation (the self-assessment
gradient is per row too), so each Triton *program* owns a tile of ``BB`` rows
and runs the whole operation for them, time loop included: ``imagine`` and
``self_regulate`` are ONE launch each. Between layers a program's
activations go through a small per-row global scratch (L1/L2 resident on a
GPU) because Triton register tensors cannot be sliced dynamically; a
``tl.debug_barrier`` orders those writes and reads inside the program.
LayerNorm statistics are taken in two passes over that scratch (mean, then
centred variance) so that they match ``torch.layer_norm`` to fp32 rounding.
Matrix products use ``tl.dot(..., input_precision="ieee")``: true fp32, no
TF32, so results match the torch reference to ~1e-6.

Shapes: ``h [B, D]``, ``z [B, Z]`` (Z = S*C), ``a [B, A]``, ``embed [B, E]``,
``u [B, S]`` (uniforms), ``eps [B, A]`` (standard normals), ``s = [h, z]
[B, D+Z]``, ``psi [B, N]``.
"""
from __future__ import annotations

from typing import Mapping

import torch
import triton
import triton.language as tl

from metacog_fast.ops.rssm.pack import PackedMLP, check_tensor, dims_of, packed, prior_sample, split_u, weights_on
from metacog_fast.ops.rssm.sizes import RssmSizes

BLOCK_N = 64  # output columns per tile
BLOCK_K = 32  # reduction chunk


def _block_b(B: int) -> int:
    return min(64, max(16, triton.next_power_of_2(B)))


# ---------------------------------------------------------------------------
# Device helpers (inlined into the kernels)
# ---------------------------------------------------------------------------
@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _tanh(x):
    # tanh(x) = 1 - 2/(exp(2x)+1): stable at both ends in fp32
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def _softplus(x):
    # torch.nn.functional.softplus (beta=1, threshold=20)
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))


@triton.jit
def _mm_acc(acc, x_ptr, x_stride, K, w_ptr, w_stride, w_col0, rows, rmask, cols, cmask,
            BLOCK_K: tl.constexpr):
    """acc[BB, BN] += x[rows, 0:K] @ W[cols, w_col0:w_col0+K]^T."""
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        km = ks < K
        xt = tl.load(x_ptr + rows[:, None] * x_stride + ks[None, :], mask=rmask[:, None] & km[None, :], other=0.0)
        wt = tl.load(w_ptr + cols[None, :] * w_stride + (w_col0 + ks)[:, None],
                     mask=cmask[None, :] & km[:, None], other=0.0)
        acc += tl.dot(xt, wt, input_precision="ieee")
    return acc


@triton.jit
def _dense(x1, s1, K1, x2, s2, K2, w_ptr, b_ptr, y_ptr, y_stride, N, rows, rmask,
           HAS_BIAS: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """y[rows, :N] = [x1, x2] @ W^T (+ b); returns the row sums of y (for LayerNorm)."""
    tot = tl.zeros([BB], dtype=tl.float32)
    for n0 in range(0, N, BN):
        cols = n0 + tl.arange(0, BN)
        cm = cols < N
        acc = tl.zeros([BB, BN], dtype=tl.float32)
        acc = _mm_acc(acc, x1, s1, K1, w_ptr, K1 + K2, 0, rows, rmask, cols, cm, BK)
        if K2 > 0:
            acc = _mm_acc(acc, x2, s2, K2, w_ptr, K1 + K2, K1, rows, rmask, cols, cm, BK)
        if HAS_BIAS:
            acc += tl.load(b_ptr + cols, mask=cm, other=0.0)[None, :]
        acc = tl.where(cm[None, :], acc, 0.0)
        tl.store(y_ptr + rows[:, None] * y_stride + cols[None, :], acc, mask=rmask[:, None] & cm[None, :])
        tot += tl.sum(acc, axis=1)
    tl.debug_barrier()
    return tot


@triton.jit
def _ln_stats(y_ptr, y_stride, N, tot, rows, rmask, BB: tl.constexpr, BN: tl.constexpr):
    """(mean, rstd) of y[rows, :N] with centred variance, eps 1e-3."""
    mean = tot / N
    sq = tl.zeros([BB], dtype=tl.float32)
    for n0 in range(0, N, BN):
        cols = n0 + tl.arange(0, BN)
        cm = cols < N
        y = tl.load(y_ptr + rows[:, None] * y_stride + cols[None, :], mask=rmask[:, None] & cm[None, :], other=0.0)
        d = tl.where(cm[None, :], y - mean[:, None], 0.0)
        sq += tl.sum(d * d, axis=1)
    rstd = 1.0 / tl.sqrt(sq / N + 1e-3)
    return mean, rstd


@triton.jit
def _dense_ln_silu(x1, s1, K1, x2, s2, K2, w_ptr, b_ptr, g_ptr, be_ptr, y_ptr, N, rows, rmask,
                   n_ptr, HAS_BIAS: tl.constexpr, SAVE_N: tl.constexpr,
                   BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """y = silu(ln([x1, x2] @ W^T + b)) into y[rows, :N] (row stride N).

    With SAVE_N also writes the normalised pre-affine values n to n_ptr (row stride N) and
    returns rstd [BB] (for the analytic backward)."""
    tot = _dense(x1, s1, K1, x2, s2, K2, w_ptr, b_ptr, y_ptr, N, N, rows, rmask, HAS_BIAS, BB, BN, BK)
    mean, rstd = _ln_stats(y_ptr, N, N, tot, rows, rmask, BB, BN)
    for n0 in range(0, N, BN):
        cols = n0 + tl.arange(0, BN)
        cm = cols < N
        m2 = rmask[:, None] & cm[None, :]
        y = tl.load(y_ptr + rows[:, None] * N + cols[None, :], mask=m2, other=0.0)
        nrm = (y - mean[:, None]) * rstd[:, None]
        if SAVE_N:
            tl.store(n_ptr + rows[:, None] * N + cols[None, :], nrm, mask=m2)
        l = nrm * tl.load(g_ptr + cols, mask=cm, other=0.0)[None, :] + tl.load(be_ptr + cols, mask=cm, other=0.0)[None, :]
        tl.store(y_ptr + rows[:, None] * N + cols[None, :], l * _sigmoid(l), mask=m2)
    tl.debug_barrier()
    return rstd


@triton.jit
def _gru(x_ptr, Hd, h_ptr, h_stride, w_ptr, g_ptr, be_ptr, gs_ptr, hout_ptr, hout_stride, D, rows, rmask,
         BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """h' = GRU(x [rows, Hd], h [rows, D]) into hout (may alias h: same element, same thread).

    gs_ptr: scratch [*, 3D] for the gate pre-activations."""
    D3 = 3 * D
    tot = _dense(x_ptr, Hd, Hd, h_ptr, h_stride, D, w_ptr, w_ptr, gs_ptr, D3, D3, rows, rmask, False, BB, BN, BK)
    mean, rstd = _ln_stats(gs_ptr, D3, D3, tot, rows, rmask, BB, BN)
    for d0 in range(0, D, BN):
        cols = d0 + tl.arange(0, BN)
        cm = cols < D
        m2 = rmask[:, None] & cm[None, :]
        base = gs_ptr + rows[:, None] * D3 + cols[None, :]
        r = (tl.load(base, mask=m2, other=0.0) - mean[:, None]) * rstd[:, None]
        c = (tl.load(base + D, mask=m2, other=0.0) - mean[:, None]) * rstd[:, None]
        u = (tl.load(base + 2 * D, mask=m2, other=0.0) - mean[:, None]) * rstd[:, None]
        r = r * tl.load(g_ptr + cols, mask=cm, other=0.0)[None, :] + tl.load(be_ptr + cols, mask=cm, other=0.0)[None, :]
        c = c * tl.load(g_ptr + D + cols, mask=cm, other=0.0)[None, :] + tl.load(be_ptr + D + cols, mask=cm, other=0.0)[None, :]
        u = u * tl.load(g_ptr + 2 * D + cols, mask=cm, other=0.0)[None, :] + tl.load(be_ptr + 2 * D + cols, mask=cm, other=0.0)[None, :]
        r = _sigmoid(r)
        c = _tanh(r * c)
        u = _sigmoid(u - 1.0)
        h = tl.load(h_ptr + rows[:, None] * h_stride + cols[None, :], mask=m2, other=0.0)
        tl.store(hout_ptr + rows[:, None] * hout_stride + cols[None, :], u * c + (1.0 - u) * h, mask=m2)
    tl.debug_barrier()


@triton.jit
def _seq_model(z_ptr, z_stride, Z, a_ptr, a_stride, A, h_ptr, h_stride, hout_ptr, hout_stride,
               wi, bi, gi, bei, wg, gg, beg, xs_ptr, gs_ptr, Hd, D, rows, rmask,
               BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """f(h, z, a): img_in then GRU; h' into hout (may alias h)."""
    _dense_ln_silu(z_ptr, z_stride, Z, a_ptr, a_stride, A, wi, bi, gi, bei, xs_ptr, Hd, rows, rmask,
                   xs_ptr, True, False, BB, BN, BK)
    _gru(xs_ptr, Hd, h_ptr, h_stride, wg, gg, beg, gs_ptr, hout_ptr, hout_stride, D, rows, rmask, BB, BN, BK)


@triton.jit
def _logits_sample(x_ptr, Hd, wl, bl, lo_ptr, Z, u_ptr, S, C, zout_ptr, zout_stride, rows, rmask,
                   BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr):
    """logits = x @ Wl^T + bl into lo [rows, Z]; z = one-hot inverse-CDF sample (unimix 0.01) with u [rows, S]."""
    _dense(x_ptr, Hd, Hd, x_ptr, Hd, 0, wl, bl, lo_ptr, Z, Z, rows, rmask, True, BB, BN, BK)
    cls = tl.arange(0, BC)
    cm = cls < C
    m2 = rmask[:, None] & cm[None, :]
    for s in range(0, S):
        lg = tl.load(lo_ptr + rows[:, None] * Z + s * C + cls[None, :], mask=m2, other=0.0)
        lg = tl.where(cm[None, :], lg, -float("inf"))  # padded classes only: no inf-inf on masked rows
        mx = tl.max(lg, axis=1)
        e = tl.where(cm[None, :], tl.exp(lg - mx[:, None]), 0.0)
        p = 0.99 * (e / tl.sum(e, axis=1)[:, None]) + 0.01 / C
        p = tl.where(cm[None, :], p, 0.0)
        cs = tl.cumsum(p, axis=1)
        uu = tl.load(u_ptr + rows * S + s, mask=rmask, other=0.0)
        hit = (cs > uu[:, None]) & cm[None, :]
        k = tl.min(tl.where(hit, cls[None, :], C), axis=1)
        k = tl.minimum(k, C - 1)  # u at or above the rounded total: last class
        onehot = tl.where(cls[None, :] == k[:, None], 1.0, 0.0)
        tl.store(zout_ptr + rows[:, None] * zout_stride + s * C + cls[None, :], onehot, mask=m2)
    tl.debug_barrier()


@triton.jit
def _mlp_trunk(s_ptr, s_stride, K0, w0, wh, bb, gg, be, L, Hd, act_ptr, n_ptr, r_ptr, B, rows, rmask,
               SAVE_N: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """L x silu(ln(W x + b)) from s [rows, K0]; layer i output in act[i] ([L, B, Hd]).

    With SAVE_N: n[i] ([L, B, Hd]) and rstd r[i] ([L, B]) for the backward."""
    rstd = _dense_ln_silu(s_ptr, s_stride, K0, s_ptr, s_stride, 0, w0, bb, gg, be, act_ptr, Hd, rows, rmask,
                          n_ptr, True, SAVE_N, BB, BN, BK)
    if SAVE_N:
        tl.store(r_ptr + rows, rstd, mask=rmask)
    for i in range(1, L):
        rstd = _dense_ln_silu(act_ptr + (i - 1) * B * Hd, Hd, Hd, act_ptr, Hd, 0, wh + (i - 1) * Hd * Hd,
                              bb + i * Hd, gg + i * Hd, be + i * Hd, act_ptr + i * B * Hd, Hd, rows, rmask,
                              n_ptr + i * B * Hd, True, SAVE_N, BB, BN, BK)
        if SAVE_N:
            tl.store(r_ptr + i * B + rows, rstd, mask=rmask)


@triton.jit
def _actor(s_ptr, s_stride, K0, w0, wh, bb, gg, be, wo, bo, L, Hd, A, act_ptr, ao_ptr, eps_ptr,
           aout_ptr, B, rows, rmask, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BA: tl.constexpr):
    """a = tanh(mean + (softplus(raw) + 0.1) * eps) into aout [rows, A]; ao: scratch [B, 2A]."""
    _mlp_trunk(s_ptr, s_stride, K0, w0, wh, bb, gg, be, L, Hd, act_ptr, act_ptr, act_ptr, B, rows, rmask,
               False, BB, BN, BK)
    last = act_ptr + (L - 1) * B * Hd
    _dense(last, Hd, Hd, last, Hd, 0, wo, bo, ao_ptr, 2 * A, 2 * A, rows, rmask, True, BB, BN, BK)
    ac = tl.arange(0, BA)
    am = ac < A
    m2 = rmask[:, None] & am[None, :]
    mean = tl.load(ao_ptr + rows[:, None] * (2 * A) + ac[None, :], mask=m2, other=0.0)
    raw = tl.load(ao_ptr + rows[:, None] * (2 * A) + A + ac[None, :], mask=m2, other=0.0)
    ep = tl.load(eps_ptr + rows[:, None] * A + ac[None, :], mask=m2, other=0.0)
    std = _softplus(raw) + 0.1
    tl.store(aout_ptr + rows[:, None] * A + ac[None, :], _tanh(mean + std * ep), mask=m2)
    tl.debug_barrier()


@triton.jit
def _sa_fwd_bwd(s_ptr, K0, w0, wh, bb, gg, be, wo, bo, L, Hd, NO, act_ptr, n_ptr, r_ptr, gx_ptr, gy_ptr,
                psi_ptr, grad_ptr, B, rows, rmask, GRAD: tl.constexpr,
                BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BO: tl.constexpr):
    """psi = sigmoid(sa(s)) into psi [rows, NO]; with GRAD, d(sum psi)/ds into grad [rows, K0].

    s and grad have row stride K0; act/n: [L, B, Hd], r: [L, B], gx/gy: [B, Hd] scratch."""
    _mlp_trunk(s_ptr, K0, K0, w0, wh, bb, gg, be, L, Hd, act_ptr, n_ptr, r_ptr, B, rows, rmask,
               GRAD, BB, BN, BK)
    last = act_ptr + (L - 1) * B * Hd
    oc = tl.arange(0, BO)
    om = oc < NO
    acc = tl.zeros([BB, BO], dtype=tl.float32)
    acc = _mm_acc(acc, last, Hd, Hd, wo, Hd, 0, rows, rmask, oc, om, BK)
    acc += tl.load(bo + oc, mask=om, other=0.0)[None, :]
    psi = _sigmoid(acc)
    tl.store(psi_ptr + rows[:, None] * NO + oc[None, :], psi, mask=rmask[:, None] & om[None, :])
    if GRAD:
        gp = tl.where(om[None, :], psi * (1.0 - psi), 0.0)  # d sum(psi) / d logits  [BB, BO]
        # gx = gp @ Wo   ([BB, BO] @ [BO, Hd])
        for n0 in range(0, Hd, BN):
            cols = n0 + tl.arange(0, BN)
            cm = cols < Hd
            wt = tl.load(wo + oc[:, None] * Hd + cols[None, :], mask=om[:, None] & cm[None, :], other=0.0)
            gxt = tl.dot(gp, wt, input_precision="ieee")
            tl.store(gx_ptr + rows[:, None] * Hd + cols[None, :], gxt, mask=rmask[:, None] & cm[None, :])
        tl.debug_barrier()
        for j in range(0, L):
            i = L - 1 - j
            n_i = n_ptr + i * B * Hd
            rstd = tl.load(r_ptr + i * B + rows, mask=rmask, other=0.0)
            # silu and affine backward: gn = gx * silu'(l) * gamma
            m1 = tl.zeros([BB], dtype=tl.float32)
            m2s = tl.zeros([BB], dtype=tl.float32)
            for n0 in range(0, Hd, BN):
                cols = n0 + tl.arange(0, BN)
                cm = cols < Hd
                mm = rmask[:, None] & cm[None, :]
                off = rows[:, None] * Hd + cols[None, :]
                nv = tl.load(n_i + off, mask=mm, other=0.0)
                gam = tl.load(gg + i * Hd + cols, mask=cm, other=0.0)[None, :]
                l = nv * gam + tl.load(be + i * Hd + cols, mask=cm, other=0.0)[None, :]
                sg = _sigmoid(l)
                gn = tl.load(gx_ptr + off, mask=mm, other=0.0) * (sg * (1.0 + l * (1.0 - sg))) * gam
                gn = tl.where(mm, gn, 0.0)
                tl.store(gy_ptr + off, gn, mask=mm)
                m1 += tl.sum(gn, axis=1)
                m2s += tl.sum(gn * nv, axis=1)
            m1 = m1 / Hd
            m2s = m2s / Hd
            tl.debug_barrier()
            # LayerNorm backward: gy = rstd * (gn - mean(gn) - n * mean(gn * n))
            for n0 in range(0, Hd, BN):
                cols = n0 + tl.arange(0, BN)
                cm = cols < Hd
                mm = rmask[:, None] & cm[None, :]
                off = rows[:, None] * Hd + cols[None, :]
                nv = tl.load(n_i + off, mask=mm, other=0.0)
                gn = tl.load(gy_ptr + off, mask=mm, other=0.0)
                tl.store(gy_ptr + off, rstd[:, None] * (gn - m1[:, None] - nv * m2s[:, None]), mask=mm)
            tl.debug_barrier()
            # input gradient: g_in = gy @ W_i   ([BB, Hd] @ [Hd, K_in])
            if i == 0:
                w_i = w0
                k_in = K0
                dst = grad_ptr
            else:
                w_i = wh + (i - 1) * Hd * Hd
                k_in = Hd
                dst = gx_ptr
            for k0 in range(0, k_in, BN):
                kc = k0 + tl.arange(0, BN)
                km = kc < k_in
                acc2 = tl.zeros([BB, BN], dtype=tl.float32)
                for n0 in range(0, Hd, BK):
                    nc = n0 + tl.arange(0, BK)
                    nm = nc < Hd
                    gyt = tl.load(gy_ptr + rows[:, None] * Hd + nc[None, :], mask=rmask[:, None] & nm[None, :],
                                  other=0.0)
                    wt = tl.load(w_i + nc[:, None] * k_in + kc[None, :], mask=nm[:, None] & km[None, :], other=0.0)
                    acc2 += tl.dot(gyt, wt, input_precision="ieee")
                tl.store(dst + rows[:, None] * k_in + kc[None, :], acc2, mask=rmask[:, None] & km[None, :])
            tl.debug_barrier()


# ---------------------------------------------------------------------------
# Kernels (one program = one tile of BB batch rows)
# ---------------------------------------------------------------------------
@triton.jit
def _img_step_kernel(h_ptr, z_ptr, a_ptr, u_ptr, hout_ptr, lo_ptr, zout_ptr,
                     wi, bi, gi, bei, wg, gg, beg, wo, bo, go, beo, wl, bl,
                     xs_ptr, gs_ptr, B, D, Hd, Z, A, S, C,
                     BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr):
    rows = tl.program_id(0) * BB + tl.arange(0, BB)
    rmask = rows < B
    _seq_model(z_ptr, Z, Z, a_ptr, A, A, h_ptr, D, hout_ptr, D, wi, bi, gi, bei, wg, gg, beg,
               xs_ptr, gs_ptr, Hd, D, rows, rmask, BB, BN, BK)
    _dense_ln_silu(hout_ptr, D, D, hout_ptr, D, 0, wo, bo, go, beo, xs_ptr, Hd, rows, rmask, xs_ptr,
                   True, False, BB, BN, BK)
    _logits_sample(xs_ptr, Hd, wl, bl, lo_ptr, Z, u_ptr, S, C, zout_ptr, Z, rows, rmask, BB, BN, BK, BC)


@triton.jit
def _obs_step_kernel(h_ptr, z_ptr, a_ptr, e_ptr, u_ptr, hout_ptr, lo_ptr, zout_ptr,
                     wi, bi, gi, bei, wg, gg, beg, wo, bo, go, beo, wl, bl,
                     xs_ptr, gs_ptr, B, D, Hd, Z, A, E, S, C,
                     BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr):
    rows = tl.program_id(0) * BB + tl.arange(0, BB)
    rmask = rows < B
    _seq_model(z_ptr, Z, Z, a_ptr, A, A, h_ptr, D, hout_ptr, D, wi, bi, gi, bei, wg, gg, beg,
               xs_ptr, gs_ptr, Hd, D, rows, rmask, BB, BN, BK)
    _dense_ln_silu(hout_ptr, D, D, e_ptr, E, E, wo, bo, go, beo, xs_ptr, Hd, rows, rmask, xs_ptr,
                   True, False, BB, BN, BK)
    _logits_sample(xs_ptr, Hd, wl, bl, lo_ptr, Z, u_ptr, S, C, zout_ptr, Z, rows, rmask, BB, BN, BK, BC)


@triton.jit
def _imagine_kernel(h0_ptr, z0_ptr, eps_ptr, u_ptr, hs_ptr, zs_ptr, acts_ptr,
                    wi, bi, gi, bei, wg, gg, beg, wo, bo, go, beo, wl, bl,
                    aw0, awh, ab, ag, abe, awo, abo,
                    st_ptr, act_ptr, ao_ptr, xs_ptr, gs_ptr, lo_ptr, H, L, B, D, Hd, Z, A, S, C,
                    BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr, BA: tl.constexpr):
    """H steps of: a = actor([h, z], eps[t]); h, z = img_step(h, z, a, u[t]); outputs hs/zs/acts[t]."""
    rows = tl.program_id(0) * BB + tl.arange(0, BB)
    rmask = rows < B
    K0 = D + Z
    # state s = [h, z] in scratch st [B, D+Z]
    for k0 in range(0, K0, BN):
        kc = k0 + tl.arange(0, BN)
        mm = rmask[:, None] & (kc < K0)[None, :]
        hv = tl.load(h0_ptr + rows[:, None] * D + kc[None, :], mask=mm & (kc < D)[None, :], other=0.0)
        zv = tl.load(z0_ptr + rows[:, None] * Z + (kc - D)[None, :], mask=mm & (kc >= D)[None, :], other=0.0)
        tl.store(st_ptr + rows[:, None] * K0 + kc[None, :], hv + zv, mask=mm)
    tl.debug_barrier()
    for t in range(0, H):
        a_t = acts_ptr + t * B * A
        _actor(st_ptr, K0, K0, aw0, awh, ab, ag, abe, awo, abo, L, Hd, A, act_ptr, ao_ptr,
               eps_ptr + t * B * A, a_t, B, rows, rmask, BB, BN, BK, BA)
        _seq_model(st_ptr + D, K0, Z, a_t, A, A, st_ptr, K0, st_ptr, K0, wi, bi, gi, bei, wg, gg, beg,
                   xs_ptr, gs_ptr, Hd, D, rows, rmask, BB, BN, BK)
        _dense_ln_silu(st_ptr, K0, D, st_ptr, K0, 0, wo, bo, go, beo, xs_ptr, Hd, rows, rmask, xs_ptr,
                       True, False, BB, BN, BK)
        _logits_sample(xs_ptr, Hd, wl, bl, lo_ptr, Z, u_ptr + t * B * S, S, C, st_ptr + D, K0, rows, rmask,
                       BB, BN, BK, BC)
        for k0 in range(0, K0, BN):
            kc = k0 + tl.arange(0, BN)
            mm = rmask[:, None] & (kc < K0)[None, :]
            v = tl.load(st_ptr + rows[:, None] * K0 + kc[None, :], mask=mm, other=0.0)
            tl.store(hs_ptr + t * B * D + rows[:, None] * D + kc[None, :], v, mask=mm & (kc < D)[None, :])
            tl.store(zs_ptr + t * B * Z + rows[:, None] * Z + (kc - D)[None, :], v, mask=mm & (kc >= D)[None, :])
        tl.debug_barrier()


@triton.jit
def _self_assess_kernel(s_ptr, psi_ptr, grad_ptr, sw0, swh, sb, sg, sbe, swo, sbo,
                        act_ptr, n_ptr, r_ptr, gx_ptr, gy_ptr, L, B, K0, Hd, NO,
                        GRAD: tl.constexpr, BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                        BO: tl.constexpr):
    rows = tl.program_id(0) * BB + tl.arange(0, BB)
    rmask = rows < B
    _sa_fwd_bwd(s_ptr, K0, sw0, swh, sb, sg, sbe, swo, sbo, L, Hd, NO, act_ptr, n_ptr, r_ptr, gx_ptr, gy_ptr,
                psi_ptr, grad_ptr, B, rows, rmask, GRAD, BB, BN, BK, BO)


@triton.jit
def _self_regulate_kernel(h_ptr, z_ptr, eps_ptr, beta, aout_ptr, hout_ptr, trace_ptr,
                          wi, bi, gi, bei, wg, gg, beg,
                          aw0, awh, ab, ag, abe, awo, abo,
                          sw0, swh, sb, sg, sbe, swo, sbo,
                          st_ptr, act_ptr, n_ptr, r_ptr, gx_ptr, gy_ptr, gr_ptr, ao_ptr, xs_ptr, gs_ptr, ps_ptr,
                          H, L, B, D, Hd, Z, A, NO, TRACE: tl.constexpr,
                          BB: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, BA: tl.constexpr,
                          BO: tl.constexpr):
    """MUSE Algorithm 1 for a tile of rows, the whole H loop in this one program."""
    rows = tl.program_id(0) * BB + tl.arange(0, BB)
    rmask = rows < B
    K0 = D + Z
    for k0 in range(0, K0, BN):
        kc = k0 + tl.arange(0, BN)
        mm = rmask[:, None] & (kc < K0)[None, :]
        hv = tl.load(h_ptr + rows[:, None] * D + kc[None, :], mask=mm & (kc < D)[None, :], other=0.0)
        zv = tl.load(z_ptr + rows[:, None] * Z + (kc - D)[None, :], mask=mm & (kc >= D)[None, :], other=0.0)
        tl.store(st_ptr + rows[:, None] * K0 + kc[None, :], hv + zv, mask=mm)
    tl.debug_barrier()
    for t in range(0, H):
        # line 9: a ~ actor(s); line 10: h = f(s, a), z kept
        _actor(st_ptr, K0, K0, aw0, awh, ab, ag, abe, awo, abo, L, Hd, A, act_ptr, ao_ptr,
               eps_ptr + t * B * A, aout_ptr, B, rows, rmask, BB, BN, BK, BA)
        _seq_model(st_ptr + D, K0, Z, aout_ptr, A, A, st_ptr, K0, st_ptr, K0, wi, bi, gi, bei, wg, gg, beg,
                   xs_ptr, gs_ptr, Hd, D, rows, rmask, BB, BN, BK)
        # line 11: s += beta * d(sum psi)/ds
        if TRACE:
            p_out = trace_ptr + t * B * NO
        else:
            p_out = ps_ptr
        _sa_fwd_bwd(st_ptr, K0, sw0, swh, sb, sg, sbe, swo, sbo, L, Hd, NO, act_ptr, n_ptr, r_ptr, gx_ptr,
                    gy_ptr, p_out, gr_ptr, B, rows, rmask, True, BB, BN, BK, BO)
        for k0 in range(0, K0, BN):
            kc = k0 + tl.arange(0, BN)
            mm = rmask[:, None] & (kc < K0)[None, :]
            off = rows[:, None] * K0 + kc[None, :]
            v = tl.load(st_ptr + off, mask=mm, other=0.0) + beta * tl.load(gr_ptr + off, mask=mm, other=0.0)
            tl.store(st_ptr + off, v, mask=mm)
        tl.debug_barrier()
    # lines 13-14
    _actor(st_ptr, K0, K0, aw0, awh, ab, ag, abe, awo, abo, L, Hd, A, act_ptr, ao_ptr,
           eps_ptr + H * B * A, aout_ptr, B, rows, rmask, BB, BN, BK, BA)
    _seq_model(st_ptr + D, K0, Z, aout_ptr, A, A, st_ptr, K0, hout_ptr, D, wi, bi, gi, bei, wg, gg, beg,
               xs_ptr, gs_ptr, Hd, D, rows, rmask, BB, BN, BK)


# ---------------------------------------------------------------------------
# Workspaces: sized once per (config, batch, device) and reused across calls
# ---------------------------------------------------------------------------
_WS_CACHE: dict = {}


def _workspace(kind: str, dims: RssmSizes, B: int, device: torch.device) -> dict[str, torch.Tensor]:
    key = (kind, dims, B, str(device))
    ws = _WS_CACHE.get(key)
    if ws is not None:
        return ws
    if len(_WS_CACHE) > 64:
        _WS_CACHE.clear()
    D, Hd, Z, A, L, N = dims.D, dims.Hd, dims.Z, dims.A, dims.L, dims.N

    def e(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, device=device, dtype=torch.float32)

    ws = {"xs": e(B, Hd), "gs": e(B, 3 * D), "lo": e(B, Z), "st": e(B, D + Z), "act": e(L, B, Hd),
          "n": e(L, B, Hd), "r": e(L, B), "gx": e(B, Hd), "gy": e(B, Hd), "gr": e(B, D + Z),
          "ao": e(B, 2 * A), "ps": e(B, N)}
    _WS_CACHE[key] = ws
    return ws


def _img_weights(w, device, head: str):
    return weights_on(w, ["img_in.w", "img_in.b", "img_in.ln.g", "img_in.ln.b", "gru.w", "gru.ln.g", "gru.ln.b",
                        f"{head}_out.w", f"{head}_out.b", f"{head}_out.ln.g", f"{head}_out.ln.b",
                        f"{head}_logits.w", f"{head}_logits.b"], device)


def _mlp_args(p: PackedMLP) -> list[torch.Tensor]:
    return [p.w0, p.wh, p.b, p.g, p.be, p.wo, p.bo]


# ---------------------------------------------------------------------------
# Public functions (called by metacog_fast.ops.rssm.api)
# ---------------------------------------------------------------------------
def img_step(w: Mapping[str, torch.Tensor], h: torch.Tensor, z: torch.Tensor, a: torch.Tensor,
             u: torch.Tensor, classes: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One prior step. ``h [B,D], z [B,Z], a [B,A], u [B,S]`` ->
    ``(h_next [B,D], z_next [B,Z] one-hot prior sample, prior_logits [B,Z])`` (the order of
    the reference and of the dispatcher)."""
    dims = dims_of(w)
    dev = h.device
    B = h.shape[0]
    h = check_tensor(h, "h", (B, dims.D), dev)
    z = check_tensor(z, "z", (B, dims.Z), dev)
    a = check_tensor(a, "a", (B, dims.A), dev)
    S, C = split_u(u, "u", (B,), dims.Z, classes)
    u = check_tensor(u, "u", (B, S), dev)
    ws = _workspace("step", dims, B, dev)
    hn = torch.empty(B, dims.D, device=dev, dtype=torch.float32)
    lo = torch.empty(B, dims.Z, device=dev, dtype=torch.float32)
    zn = torch.empty(B, dims.Z, device=dev, dtype=torch.float32)
    BB = _block_b(B)
    _img_step_kernel[(triton.cdiv(B, BB),)](
        h, z, a, u, hn, lo, zn, *_img_weights(w, dev, "img"), ws["xs"], ws["gs"],
        B, dims.D, dims.Hd, dims.Z, dims.A, S, C,
        BB=BB, BN=BLOCK_N, BK=BLOCK_K, BC=triton.next_power_of_2(C))
    return hn, zn, lo


def obs_step(w: Mapping[str, torch.Tensor], h: torch.Tensor, z: torch.Tensor, a: torch.Tensor,
             embed: torch.Tensor, u: torch.Tensor, classes: int | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One posterior step. ``h [B,D], z [B,Z], a [B,A], embed [B,E], u [B,S]`` ->
    ``(h_next [B,D], z_post [B,Z] one-hot posterior sample, post_logits [B,Z])``."""
    dims = dims_of(w)
    if dims.E <= 0:
        raise KeyError("w: missing weight 'obs_out.w' needed by obs_step")
    dev = h.device
    B = h.shape[0]
    h = check_tensor(h, "h", (B, dims.D), dev)
    z = check_tensor(z, "z", (B, dims.Z), dev)
    a = check_tensor(a, "a", (B, dims.A), dev)
    embed = check_tensor(embed, "embed", (B, dims.E), dev)
    S, C = split_u(u, "u", (B,), dims.Z, classes)
    u = check_tensor(u, "u", (B, S), dev)
    ws = _workspace("step", dims, B, dev)
    hn = torch.empty(B, dims.D, device=dev, dtype=torch.float32)
    lo = torch.empty(B, dims.Z, device=dev, dtype=torch.float32)
    zn = torch.empty(B, dims.Z, device=dev, dtype=torch.float32)
    BB = _block_b(B)
    _obs_step_kernel[(triton.cdiv(B, BB),)](
        h, z, a, embed, u, hn, lo, zn, *_img_weights(w, dev, "obs"), ws["xs"], ws["gs"],
        B, dims.D, dims.Hd, dims.Z, dims.A, dims.E, S, C,
        BB=BB, BN=BLOCK_N, BK=BLOCK_K, BC=triton.next_power_of_2(C))
    return hn, zn, lo


def imagine(w: Mapping[str, torch.Tensor], h0: torch.Tensor, z0: torch.Tensor, eps: torch.Tensor,
            u: torch.Tensor, classes: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """H imagined steps in one launch. ``h0 [B,D], z0 [B,Z], eps [H,B,A], u [H,B,S]`` ->
    ``(hs [H,B,D], zs [H,B,Z], actions [H,B,A])`` where step t acts on the state after step t-1."""
    dims = dims_of(w)
    dev = h0.device
    B = h0.shape[0]
    if eps.dim() != 3:
        raise ValueError(f"eps: expected shape [H, B, A], got {list(eps.shape)}")
    H = eps.shape[0]
    h0 = check_tensor(h0, "h0", (B, dims.D), dev)
    z0 = check_tensor(z0, "z0", (B, dims.Z), dev)
    eps = check_tensor(eps, "eps", (H, B, dims.A), dev)
    S, C = split_u(u, "u", (H, B), dims.Z, classes)
    u = check_tensor(u, "u", (H, B, S), dev)
    ws = _workspace("imagine", dims, B, dev)
    hs = torch.empty(H, B, dims.D, device=dev, dtype=torch.float32)
    zs = torch.empty(H, B, dims.Z, device=dev, dtype=torch.float32)
    acts = torch.empty(H, B, dims.A, device=dev, dtype=torch.float32)
    if H == 0:
        return hs, zs, acts
    BB = _block_b(B)
    _imagine_kernel[(triton.cdiv(B, BB),)](
        h0, z0, eps, u, hs, zs, acts, *_img_weights(w, dev, "img"), *_mlp_args(packed(w, "actor")),
        ws["st"], ws["act"], ws["ao"], ws["xs"], ws["gs"], ws["lo"], H, dims.L, B, dims.D, dims.Hd, dims.Z,
        dims.A, S, C, BB=BB, BN=BLOCK_N, BK=BLOCK_K, BC=triton.next_power_of_2(C),
        BA=max(2, triton.next_power_of_2(dims.A)))
    return hs, zs, acts


def self_assess(w: Mapping[str, torch.Tensor], s: torch.Tensor, grad: bool = False):
    """``psi = sigmoid(sa(s))`` for ``s [B, D+Z]`` -> ``psi [B, N]``, or with ``grad``
    ``(psi, d(sum_i psi_i)/ds [B, D+Z])`` from the analytic backward in the same launch."""
    dims = dims_of(w)
    dev = s.device
    if s.dim() != 2:
        raise ValueError(f"s: expected shape [B, D+Z={dims.D + dims.Z}], got {list(s.shape)}")
    B = s.shape[0]
    s = check_tensor(s, "s", (B, dims.D + dims.Z), dev)
    ws = _workspace("sa", dims, B, dev)
    psi = torch.empty(B, dims.N, device=dev, dtype=torch.float32)
    g = torch.empty(B, dims.D + dims.Z, device=dev, dtype=torch.float32) if grad else ws["gr"]
    BB = _block_b(B)
    _self_assess_kernel[(triton.cdiv(B, BB),)](
        s, psi, g, *_mlp_args(packed(w, "sa")), ws["act"], ws["n"], ws["r"], ws["gx"], ws["gy"],
        dims.L, B, dims.D + dims.Z, dims.Hd, dims.N, GRAD=bool(grad), BB=BB, BN=BLOCK_N, BK=BLOCK_K,
        BO=max(16, triton.next_power_of_2(dims.N)))
    return (psi, g) if grad else psi


def self_regulate(w: Mapping[str, torch.Tensor], h: torch.Tensor, z: torch.Tensor | None, H: int, beta: float,
                  eps: torch.Tensor, trace: bool = False, *, u: torch.Tensor | None = None,
                  classes: int | None = None):
    """MUSE Algorithm 1 (docs/design.md §1.2) in ONE launch. ``h [B,D], z [B,Z], eps [H+1,B,A]`` ->
    ``(z_t [B,Z], a_t [B,A], h_next [B,D])`` and with ``trace`` also ``psi_trace [H,B,N]``
    (psi at each iteration's state before its gradient step). ``z=None``: z_t is sampled from
    the prior of h with ``u [B, S]`` first (by the reference)."""
    if z is None:
        z = prior_sample(w, h, u, classes)
    dims = dims_of(w)
    dev = h.device
    B = h.shape[0]
    H = int(H)
    if H < 0:
        raise ValueError(f"H: expected a non-negative number of iterations, got {H}")
    h = check_tensor(h, "h", (B, dims.D), dev)
    z = check_tensor(z, "z", (B, dims.Z), dev)
    eps = check_tensor(eps, "eps", (H + 1, B, dims.A), dev)
    ws = _workspace("sr", dims, B, dev)
    a_t = torch.empty(B, dims.A, device=dev, dtype=torch.float32)
    h_next = torch.empty(B, dims.D, device=dev, dtype=torch.float32)
    tr = torch.empty(H, B, dims.N, device=dev, dtype=torch.float32) if trace else ws["ps"]
    BB = _block_b(B)
    _self_regulate_kernel[(triton.cdiv(B, BB),)](
        h, z, eps, float(beta), a_t, h_next, tr,
        *weights_on(w, ["img_in.w", "img_in.b", "img_in.ln.g", "img_in.ln.b", "gru.w", "gru.ln.g", "gru.ln.b"], dev),
        *_mlp_args(packed(w, "actor")), *_mlp_args(packed(w, "sa")),
        ws["st"], ws["act"], ws["n"], ws["r"], ws["gx"], ws["gy"], ws["gr"], ws["ao"], ws["xs"], ws["gs"], ws["ps"],
        H, dims.L, B, dims.D, dims.Hd, dims.Z, dims.A, dims.N, TRACE=bool(trace),
        BB=BB, BN=BLOCK_N, BK=BLOCK_K, BA=max(2, triton.next_power_of_2(dims.A)),
        BO=max(16, triton.next_power_of_2(dims.N)))
    out = (z, a_t, h_next)
    return out + (tr,) if trace else out
