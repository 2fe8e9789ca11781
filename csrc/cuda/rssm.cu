// CUDA RSSM / self-assessment / self-regulation kernels (docs/design.md §1.1, §1.2).
//
// One kernel per operation, templated on the execution mode:
//   GRID  (B <= kPersistentMaxB): persistent cooperative kernel. Every block stages the
//         inputs of a layer for ALL rows in shared memory (applying the previous layer's
//         LayerNorm + SiLU on the fly, redundantly: a few KB), then the layer's output
//         rows are spread over every warp of the grid; a grid-wide sync separates layers.
//         A whole self_regulate decision (H iterations) is one launch; weights stream
//         from L2 (an XS model is ~7 MB per iteration, it stays L2-resident on H100/H200).
//   BLOCK (large B): one block per tile of kRows rows runs the same code with
//         __syncthreads between layers; weights are shared by the kRows rows of a tile.
// Layer outputs go to a per-row global workspace (raw, pre-LayerNorm) and the consumer
// normalises them: LayerNorm statistics are two-pass (mean, centred variance) per row.
// The self-assessment gradient is the analytic backward of sigmoid/linear/LN/SiLU using
// transposed copies of the sa weights (coalesced reads); the last backward layer writes
// the regulated state s + beta * grad directly (no extra pass).
#ifdef METACOG_CUDA_HOST_EMULATION
#include "cuda/host_emulation.cuh"  // run on the CPU for tests (see that file)
#else
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#define METACOG_DYNAMIC_SMEM(name) extern __shared__ float4 name[]
#endif

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "cuda/rssm.cuh"

namespace cg = cooperative_groups;

namespace metacog {
namespace cuda_rssm {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = kPersistentMaxB;  // rows per block in BLOCK mode; max B in GRID mode
constexpr int kMaxN = 16;               // max self-assessment outputs (smem for d psi)
constexpr float kLnEps = 1e-3f;

struct Scratch {
  float* ya;  // [L, B, Hd] actor layer outputs (raw)
  float* yi;  // [B, Hd]    img_in (raw)
  float* gg;  // [B, 3D]    GRU gates (raw)
  float* hp;  // [B, D]     h' of the current iteration
  float* ys;  // [L, B, Hd] sa layer outputs (raw)
  float* gx;  // [2, B, G]  backward ping-pong, G = max(Hd, D+Z)
  float* st;  // [2, B, D+Z] state double buffer
  float* yo;  // [B, Hd]    img_out / obs_out (raw)
  float* lo;  // [B, Z]     logits (imagine)
};

struct Params {
  Dims d;
  int B, H;
  float beta;
  int kx;        // shared staging row stride (floats, multiple of 4)
  int rows_alloc;  // rows of shared staging
  int gstride;   // G
  bool obs;
  const float* w[W_COUNT];
  const float *h, *z, *a, *u, *embed, *eps, *s;
  float *h_out, *z_out, *lo_out, *hs, *zs, *acts, *psi, *grad, *trace, *a_out;
  Scratch sc;
};

struct Ctx {
  int r0, nr;    // rows of this block
  int wid, nw;   // work warp index / count for layer outputs
  int lane, bwarp;
  bool writer;   // writes per-row results computed redundantly in a stage
  float* xs;     // [rows_alloc, kx]
  float* tmp;    // [rows_alloc, Hd]
  float* gp;     // [rows_alloc, kMaxN]
  int kx, hd;
};

template <bool GRID>
__device__ __forceinline__ Ctx make_ctx(const Params& p, float* smem) {
  Ctx c;
  c.lane = threadIdx.x & 31;
  c.bwarp = threadIdx.x >> 5;
  if (GRID) {
    c.r0 = 0;
    c.nr = p.B;
    c.wid = blockIdx.x * kWarps + c.bwarp;
    c.nw = gridDim.x * kWarps;
    c.writer = blockIdx.x == 0;
  } else {
    c.r0 = blockIdx.x * kRows;
    c.nr = min(kRows, p.B - c.r0);
    c.wid = c.bwarp;
    c.nw = kWarps;
    c.writer = true;
  }
  c.kx = p.kx;
  c.hd = p.d.Hd;
  c.xs = smem;
  c.tmp = smem + static_cast<size_t>(p.rows_alloc) * p.kx;
  c.gp = c.tmp + static_cast<size_t>(p.rows_alloc) * p.d.Hd;
  return c;
}

template <bool GRID>
__device__ __forceinline__ void phase_sync() {
  if constexpr (GRID) {
    cg::this_grid().sync();
  } else {
    __syncthreads();
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float sigm(float x) { return 1.f / (1.f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// y[b, o] = W[o, :K] . xs[b, :K] (+ bias[o]) for b < nr, o < OUT, handed to epi(b, o, y).
// OPW output rows per warp (4 in BLOCK mode for register reuse of x, 1 in GRID mode
// for parallelism); lanes stride K (coalesced weight rows), float4 when K % 4 == 0.
template <int OPW, class Epi>
__device__ void matvec(const Ctx& c, const float* __restrict__ W, const float* __restrict__ bias, int OUT, int K,
                       Epi epi) {
  const bool vec = (K & 3) == 0;
  for (int o0 = c.wid * OPW; o0 < OUT; o0 += c.nw * OPW) {
    float acc[OPW][kRows];
#pragma unroll
    for (int j = 0; j < OPW; ++j)
#pragma unroll
      for (int b = 0; b < kRows; ++b) acc[j][b] = 0.f;
    if (vec) {
      const int K4 = K >> 2;
// persistent path (OPW 1): several independent weight loads in flight per lane (latency-bound
// at B=1); the tiled path already has OPW*kRows accumulators and would spill
#pragma unroll(OPW == 1 ? 4 : 1)
      for (int k4 = c.lane; k4 < K4; k4 += 32) {
        float4 xv[kRows];
#pragma unroll
        for (int b = 0; b < kRows; ++b)
          if (b < c.nr) xv[b] = reinterpret_cast<const float4*>(c.xs + b * c.kx)[k4];
#pragma unroll
        for (int j = 0; j < OPW; ++j) {
          if (o0 + j < OUT) {
            const float4 wv = __ldg(reinterpret_cast<const float4*>(W + static_cast<size_t>(o0 + j) * K) + k4);
#pragma unroll
            for (int b = 0; b < kRows; ++b)
              if (b < c.nr) acc[j][b] += wv.x * xv[b].x + wv.y * xv[b].y + wv.z * xv[b].z + wv.w * xv[b].w;
          }
        }
      }
    } else {
      for (int k = c.lane; k < K; k += 32) {
        float xv[kRows];
#pragma unroll
        for (int b = 0; b < kRows; ++b)
          if (b < c.nr) xv[b] = c.xs[b * c.kx + k];
#pragma unroll
        for (int j = 0; j < OPW; ++j) {
          if (o0 + j < OUT) {
            const float wv = __ldg(W + static_cast<size_t>(o0 + j) * K + k);
#pragma unroll
            for (int b = 0; b < kRows; ++b)
              if (b < c.nr) acc[j][b] += wv * xv[b];
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < OPW; ++j)
#pragma unroll
      for (int b = 0; b < kRows; ++b)
        if (b < c.nr) acc[j][b] = warp_sum(acc[j][b]);  // nr is warp-uniform: no divergent shuffle
#pragma unroll
    for (int j = 0; j < OPW; ++j)
#pragma unroll
      for (int b = 0; b < kRows; ++b)
        if (c.lane == ((j * kRows + b) & 31) && o0 + j < OUT && b < c.nr)
          epi(b, o0 + j, acc[j][b] + (bias ? __ldg(bias + o0 + j) : 0.f));
  }
}

// xs[b, col0 : col0+n] = src[(r0+b)*stride : +n]
__device__ void stage_copy(const Ctx& c, const float* src, int stride, int n, int col0) {
  for (int i = threadIdx.x; i < c.nr * n; i += blockDim.x) {
    const int b = i / n, k = i - (i / n) * n;
    c.xs[b * c.kx + col0 + k] = src[static_cast<size_t>(c.r0 + b) * stride + k];
  }
}

// Mean and 1/sqrt(var + eps) of y[0:n] (two passes), for the calling warp.
__device__ void row_stats(const float* y, int n, int lane, float& mean, float& rstd) {
  float s = 0.f;
  for (int k = lane; k < n; k += 32) s += y[k];
  mean = warp_sum(s) / n;
  float q = 0.f;
  for (int k = lane; k < n; k += 32) {
    const float dlt = y[k] - mean;
    q += dlt * dlt;
  }
  rstd = 1.f / sqrtf(warp_sum(q) / n + kLnEps);
}

// dst[b*dstride + col0 + k] = silu(ln(y[r0+b, k]) * g + be), y rows of n (warp per row).
__device__ void stage_ln_silu(const Ctx& c, const float* y, int n, const float* g, const float* be, float* dst,
                              int dstride, int col0) {
  for (int b = c.bwarp; b < c.nr; b += kWarps) {
    const float* yr = y + static_cast<size_t>(c.r0 + b) * n;
    float mean, rstd;
    row_stats(yr, n, c.lane, mean, rstd);
    for (int k = c.lane; k < n; k += 32) {
      const float l = (yr[k] - mean) * rstd * __ldg(g + k) + __ldg(be + k);
      dst[b * dstride + col0 + k] = l * sigm(l);
    }
  }
}

// h' = GRU(gates gg, h) for the block's rows: into xs columns [col0, col0+D) when to_smem,
// and (writer) into out rows of stride ostride (if out).
__device__ void stage_hnew(const Ctx& c, const Params& p, const float* hsrc, int hstride, bool to_smem, int col0,
                           float* out, int ostride, float* out2, int o2stride) {
  const int D = p.d.D, D3 = 3 * p.d.D;
  const float* g = p.w[GRU_G];
  const float* be = p.w[GRU_BE];
  for (int b = c.bwarp; b < c.nr; b += kWarps) {
    const int row = c.r0 + b;
    const float* gr = p.sc.gg + static_cast<size_t>(row) * D3;
    float mean, rstd;
    row_stats(gr, D3, c.lane, mean, rstd);
    for (int k = c.lane; k < D; k += 32) {
      float r = (gr[k] - mean) * rstd * __ldg(g + k) + __ldg(be + k);
      float cc = (gr[D + k] - mean) * rstd * __ldg(g + D + k) + __ldg(be + D + k);
      float u = (gr[2 * D + k] - mean) * rstd * __ldg(g + 2 * D + k) + __ldg(be + 2 * D + k);
      r = sigm(r);
      cc = tanhf(r * cc);
      u = sigm(u - 1.f);
      const float hv = hsrc[static_cast<size_t>(row) * hstride + k];
      const float hn = u * cc + (1.f - u) * hv;
      if (to_smem) c.xs[b * c.kx + col0 + k] = hn;
      if (c.writer && out) out[static_cast<size_t>(row) * ostride + k] = hn;
      if (c.writer && out2) out2[static_cast<size_t>(row) * o2stride + k] = hn;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Building blocks of the operations. Each "layer" = stage (block-local) + __syncthreads +
// matvec (distributed) + phase_sync.
// ---------------------------------------------------------------------------------------

template <bool GRID>
struct Opw {
  static constexpr int value = GRID ? 1 : 4;
};

// MLP trunk (actor or sa) on s rows (stride K0): outputs raw layer i into y[i].
template <bool GRID>
__device__ void mlp_trunk(const Ctx& c, const Params& p, const float* s, int pre, float* y) {
  const Dims& d = p.d;
  const int K0 = d.D + d.Z, Hd = d.Hd;
  const float* W0 = p.w[pre + 0];
  const float* WH = p.w[pre + 1];
  const float* Bs = p.w[pre + 2];
  const float* G = p.w[pre + 3];
  const float* BE = p.w[pre + 4];
  const int B = p.B;
  stage_copy(c, s, K0, K0, 0);
  __syncthreads();
  matvec<Opw<GRID>::value>(c, W0, Bs, Hd, K0, [&](int b, int o, float v) { y[static_cast<size_t>(c.r0 + b) * Hd + o] = v; });
  phase_sync<GRID>();
  for (int i = 1; i < d.L; ++i) {
    const float* yprev = y + static_cast<size_t>(i - 1) * B * Hd;
    float* ycur = y + static_cast<size_t>(i) * B * Hd;
    stage_ln_silu(c, yprev, Hd, G + (i - 1) * Hd, BE + (i - 1) * Hd, c.xs, c.kx, 0);
    __syncthreads();
    matvec<Opw<GRID>::value>(c, WH + static_cast<size_t>(i - 1) * Hd * Hd, Bs + i * Hd, Hd, Hd,
                        [&](int b, int o, float v) { ycur[static_cast<size_t>(c.r0 + b) * Hd + o] = v; });
    phase_sync<GRID>();
  }
}

// Actor head on the trunk output ya[L-1]: a = tanh(mean + (softplus(raw)+0.1) * eps) for the
// block's rows into xs[b, col0 + j]; the writer also stores it to a_out (if given).
__device__ void stage_actor_action(const Ctx& c, const Params& p, const float* eps, int col0, float* a_out) {
  const Dims& d = p.d;
  const int Hd = d.Hd, A = d.A, L = d.L;
  const float* yl = p.sc.ya + static_cast<size_t>(L - 1) * p.B * Hd;
  stage_ln_silu(c, yl, Hd, p.w[ACT_G] + (L - 1) * Hd, p.w[ACT_BE] + (L - 1) * Hd, c.tmp, Hd, 0);
  __syncthreads();
  const float* WO = p.w[ACT_WO];
  const float* BO = p.w[ACT_BO];
  for (int b = c.bwarp; b < c.nr; b += kWarps) {
    const float* x = c.tmp + b * Hd;
    const int row = c.r0 + b;
    for (int j = 0; j < A; ++j) {
      float m = 0.f, r = 0.f;
      for (int k = c.lane; k < Hd; k += 32) {
        m += __ldg(WO + static_cast<size_t>(j) * Hd + k) * x[k];
        r += __ldg(WO + static_cast<size_t>(A + j) * Hd + k) * x[k];
      }
      m = warp_sum(m) + __ldg(BO + j);
      r = warp_sum(r) + __ldg(BO + A + j);
      const float a = tanhf(m + (softplus(r) + 0.1f) * eps[static_cast<size_t>(row) * A + j]);
      if (c.lane == 0) {
        c.xs[b * c.kx + col0 + j] = a;
        if (c.writer && a_out) a_out[static_cast<size_t>(row) * A + j] = a;
      }
    }
  }
}

// f(s, a) up to the raw GRU gates in sc.gg: img_in on [z, a], then W_gru [x, h].
// z rows at zsrc (stride zstride), h rows at hsrc (stride hstride); the action is either
// staged by the actor (eps != nullptr) or read from a_in.
template <bool GRID>
__device__ void seq_to_gates(const Ctx& c, const Params& p, const float* zsrc, int zstride, const float* hsrc,
                             int hstride, const float* eps, const float* a_in, float* a_out) {
  const Dims& d = p.d;
  const int Hd = d.Hd, Z = d.Z, A = d.A, D = d.D;
  stage_copy(c, zsrc, zstride, Z, 0);
  if (eps) {
    stage_actor_action(c, p, eps, Z, a_out);
  } else {
    stage_copy(c, a_in, A, A, Z);
  }
  __syncthreads();
  float* yi = p.sc.yi;
  matvec<Opw<GRID>::value>(c, p.w[IMG_IN_W], p.w[IMG_IN_B], Hd, Z + A,
                      [&](int b, int o, float v) { yi[static_cast<size_t>(c.r0 + b) * Hd + o] = v; });
  phase_sync<GRID>();
  stage_ln_silu(c, yi, Hd, p.w[IMG_IN_G], p.w[IMG_IN_BE], c.xs, c.kx, 0);
  stage_copy(c, hsrc, hstride, D, Hd);
  __syncthreads();
  float* gg = p.sc.gg;
  matvec<Opw<GRID>::value>(c, p.w[GRU_W], nullptr, 3 * D, Hd + D,
                      [&](int b, int o, float v) { gg[static_cast<size_t>(c.r0 + b) * 3 * D + o] = v; });
  phase_sync<GRID>();
}

// LayerNorm + SiLU backward of sa layer i for one row (calling warp): gx (grad w.r.t. the
// layer output, row of Hd) -> gy (grad w.r.t. the raw pre-LN output), row of Hd.
__device__ void ln_silu_bwd_row(const Ctx& c, const Params& p, int i, int row, const float* gx, float* gy) {
  const int Hd = p.d.Hd;
  const float* y = p.sc.ys + (static_cast<size_t>(i) * p.B + row) * Hd;
  const float* g = p.w[SA_G] + i * Hd;
  const float* be = p.w[SA_BE] + i * Hd;
  float mean, rstd;
  row_stats(y, Hd, c.lane, mean, rstd);
  float m1 = 0.f, m2 = 0.f;
  for (int k = c.lane; k < Hd; k += 32) {
    const float nv = (y[k] - mean) * rstd;
    const float gk = __ldg(g + k);
    const float l = nv * gk + __ldg(be + k);
    const float sg = sigm(l);
    const float gn = gx[k] * sg * (1.f + l * (1.f - sg)) * gk;
    gy[k] = gn;
    m1 += gn;
    m2 += gn * nv;
  }
  m1 = warp_sum(m1) / Hd;
  m2 = warp_sum(m2) / Hd;
  for (int k = c.lane; k < Hd; k += 32) {
    const float nv = (y[k] - mean) * rstd;
    gy[k] = rstd * (gy[k] - m1 - nv * m2);
  }
}

// Self-assessment on s rows (stride K0; s_smem: already staged in xs) -> psi (writer stores
// to psi_out if given); with grad, backward with epilogue grad_epi(b, k, value) for the
// d(sum psi)/ds entries.
template <bool GRID, class GradEpi>
__device__ void sa_forward_backward(const Ctx& c, const Params& p, bool staged, const float* s, float* psi_out,
                                    bool grad, GradEpi grad_epi) {
  const Dims& d = p.d;
  const int K0 = d.D + d.Z, Hd = d.Hd, L = d.L, N = d.N, B = p.B;
  float* ys = p.sc.ys;
  if (!staged) stage_copy(c, s, K0, K0, 0);
  __syncthreads();
  matvec<Opw<GRID>::value>(c, p.w[SA_W0], p.w[SA_B], Hd, K0,
                      [&](int b, int o, float v) { ys[static_cast<size_t>(c.r0 + b) * Hd + o] = v; });
  phase_sync<GRID>();
  for (int i = 1; i < L; ++i) {
    float* ycur = ys + static_cast<size_t>(i) * B * Hd;
    stage_ln_silu(c, ys + static_cast<size_t>(i - 1) * B * Hd, Hd, p.w[SA_G] + (i - 1) * Hd,
                  p.w[SA_BE] + (i - 1) * Hd, c.xs, c.kx, 0);
    __syncthreads();
    matvec<Opw<GRID>::value>(c, p.w[SA_WH] + static_cast<size_t>(i - 1) * Hd * Hd, p.w[SA_B] + i * Hd, Hd, Hd,
                        [&](int b, int o, float v) { ycur[static_cast<size_t>(c.r0 + b) * Hd + o] = v; });
    phase_sync<GRID>();
  }
  // top: psi, d psi / d logits, gx = Wo^T dpsi, then LN/SiLU backward of layer L-1 into xs
  stage_ln_silu(c, ys + static_cast<size_t>(L - 1) * B * Hd, Hd, p.w[SA_G] + (L - 1) * Hd,
                p.w[SA_BE] + (L - 1) * Hd, c.tmp, Hd, 0);
  __syncthreads();
  const float* WO = p.w[SA_WO];
  const float* BO = p.w[SA_BO];
  for (int b = c.bwarp; b < c.nr; b += kWarps) {
    float* x = c.tmp + b * Hd;
    const int row = c.r0 + b;
    for (int j = 0; j < N; ++j) {
      float v = 0.f;
      for (int k = c.lane; k < Hd; k += 32) v += __ldg(WO + static_cast<size_t>(j) * Hd + k) * x[k];
      const float ps = sigm(warp_sum(v) + __ldg(BO + j));
      if (c.lane == 0) {
        c.gp[b * kMaxN + j] = ps * (1.f - ps);
        if (c.writer && psi_out) psi_out[static_cast<size_t>(row) * N + j] = ps;
      }
    }
    if (!grad) continue;
    __syncwarp();
    for (int k = c.lane; k < Hd; k += 32) {  // x no longer needed: reuse its row for gx
      float gv = 0.f;
      for (int j = 0; j < N; ++j) gv += __ldg(WO + static_cast<size_t>(j) * Hd + k) * c.gp[b * kMaxN + j];
      x[k] = gv;
    }
    __syncwarp();
    ln_silu_bwd_row(c, p, L - 1, row, x, c.xs + b * c.kx);
  }
  if (!grad) return;
  __syncthreads();
  const int G = p.gstride;
  for (int i = L - 1; i >= 0; --i) {
    if (i < L - 1) {
      const float* gxi = p.sc.gx + static_cast<size_t>(i & 1) * B * G;
      for (int b = c.bwarp; b < c.nr; b += kWarps)
        ln_silu_bwd_row(c, p, i, c.r0 + b, gxi + static_cast<size_t>(c.r0 + b) * G, c.xs + b * c.kx);
      __syncthreads();
    }
    if (i == 0) {
      matvec<Opw<GRID>::value>(c, p.w[SA_WT0], nullptr, K0, Hd, grad_epi);
    } else {
      float* gxo = p.sc.gx + static_cast<size_t>((i - 1) & 1) * B * G;
      matvec<Opw<GRID>::value>(c, p.w[SA_WHT] + static_cast<size_t>(i - 1) * Hd * Hd, nullptr, Hd, Hd,
                          [&](int b, int o, float v) { gxo[static_cast<size_t>(c.r0 + b) * G + o] = v; });
    }
    phase_sync<GRID>();
  }
}

// Inverse-CDF categorical samples (unimix 0.01) from logits rows (stride Z) for rows [r0, r0+nr):
// one warp per (row, group), lane 0 scans the C classes in order (as torch.cumsum).
template <bool GRID>
__device__ void sample_rows(const Ctx& c, const Params& p, const float* lo, const float* u, float* z1, int z1stride,
                            float* z2, int z2stride) {
  const int S = p.d.S, C = p.d.C, Z = p.d.Z;
  const int items = c.nr * S;
  for (int it = c.wid; it < items; it += c.nw) {
    const int b = it / S, sg = it - (it / S) * S;
    const int row = c.r0 + b;
    const float* l = lo + static_cast<size_t>(row) * Z + sg * C;
    float mx = -INFINITY;
    for (int k = c.lane; k < C; k += 32) mx = fmaxf(mx, l[k]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float se = 0.f;
    for (int k = c.lane; k < C; k += 32) se += expf(l[k] - mx);
    se = warp_sum(se);
    int pick = C - 1;
    if (c.lane == 0) {
      const float uu = u[static_cast<size_t>(row) * S + sg];
      float cdf = 0.f;
      for (int k = 0; k < C; ++k) {
        cdf += 0.99f * (expf(l[k] - mx) / se) + 0.01f / C;
        if (cdf > uu) {
          pick = k;
          break;
        }
      }
    }
    pick = __shfl_sync(0xffffffffu, pick, 0);
    for (int k = c.lane; k < C; k += 32) {
      const float v = k == pick ? 1.f : 0.f;
      if (z1) z1[static_cast<size_t>(row) * z1stride + sg * C + k] = v;
      if (z2) z2[static_cast<size_t>(row) * z2stride + sg * C + k] = v;
    }
  }
}

// Rows [h, z] of the block (or all rows, by block 0, in GRID mode) into st.
template <bool GRID>
__device__ void init_state(const Ctx& c, const Params& p, const float* h, const float* z, float* st) {
  const int D = p.d.D, Z = p.d.Z, K0 = D + Z;
  if (c.writer) {
    for (int i = threadIdx.x; i < c.nr * K0; i += blockDim.x) {
      const int b = i / K0, k = i - (i / K0) * K0;
      const int row = c.r0 + b;
      st[static_cast<size_t>(row) * K0 + k] =
          k < D ? h[static_cast<size_t>(row) * D + k] : z[static_cast<size_t>(row) * Z + (k - D)];
    }
  }
  phase_sync<GRID>();
}

// ---------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------

template <bool GRID>
__global__ void __launch_bounds__(kThreads, 1) k_img_step(Params p) {
  METACOG_DYNAMIC_SMEM(smem4);
  const Ctx c = make_ctx<GRID>(p, reinterpret_cast<float*>(smem4));
  const Dims& d = p.d;
  const int Hd = d.Hd, D = d.D, Z = d.Z;
  seq_to_gates<GRID>(c, p, p.z, Z, p.h, D, nullptr, p.a, nullptr);
  stage_hnew(c, p, p.h, D, true, 0, p.h_out, D, nullptr, 0);
  int K = D;
  const float* WOUT = p.w[p.obs ? OBS_OUT_W : IMG_OUT_W];
  if (p.obs) {
    stage_copy(c, p.embed, d.E, d.E, D);
    K = D + d.E;
  }
  __syncthreads();
  float* yo = p.sc.yo;
  matvec<Opw<GRID>::value>(c, WOUT, p.w[p.obs ? OBS_OUT_B : IMG_OUT_B], Hd, K,
                      [&](int b, int o, float v) { yo[static_cast<size_t>(c.r0 + b) * Hd + o] = v; });
  phase_sync<GRID>();
  stage_ln_silu(c, yo, Hd, p.w[p.obs ? OBS_OUT_G : IMG_OUT_G], p.w[p.obs ? OBS_OUT_BE : IMG_OUT_BE], c.xs, c.kx, 0);
  __syncthreads();
  float* lo = p.lo_out;
  matvec<Opw<GRID>::value>(c, p.w[p.obs ? OBS_LOGITS_W : IMG_LOGITS_W], p.w[p.obs ? OBS_LOGITS_B : IMG_LOGITS_B], Z, Hd,
                      [&](int b, int o, float v) { lo[static_cast<size_t>(c.r0 + b) * Z + o] = v; });
  phase_sync<GRID>();
  sample_rows<GRID>(c, p, lo, p.u, p.z_out, Z, nullptr, 0);
}

template <bool GRID>
__global__ void __launch_bounds__(kThreads, 1) k_imagine(Params p) {
  METACOG_DYNAMIC_SMEM(smem4);
  const Ctx c = make_ctx<GRID>(p, reinterpret_cast<float*>(smem4));
  const Dims& d = p.d;
  const int Hd = d.Hd, D = d.D, Z = d.Z, A = d.A, S = d.S, K0 = D + Z, B = p.B;
  float* cur = p.sc.st;
  float* nxt = p.sc.st + static_cast<size_t>(B) * K0;
  init_state<GRID>(c, p, p.h, p.z, cur);
  for (int t = 0; t < p.H; ++t) {
    mlp_trunk<GRID>(c, p, cur, ACT_W0, p.sc.ya);
    seq_to_gates<GRID>(c, p, cur + D, K0, cur, K0, p.eps + static_cast<size_t>(t) * B * A, nullptr,
                       p.acts + static_cast<size_t>(t) * B * A);
    stage_hnew(c, p, cur, K0, true, 0, nxt, K0, p.hs + static_cast<size_t>(t) * B * D, D);
    __syncthreads();
    float* yo = p.sc.yo;
    matvec<Opw<GRID>::value>(c, p.w[IMG_OUT_W], p.w[IMG_OUT_B], Hd, D,
                        [&](int b, int o, float v) { yo[static_cast<size_t>(c.r0 + b) * Hd + o] = v; });
    phase_sync<GRID>();
    stage_ln_silu(c, yo, Hd, p.w[IMG_OUT_G], p.w[IMG_OUT_BE], c.xs, c.kx, 0);
    __syncthreads();
    float* lo = p.sc.lo;
    matvec<Opw<GRID>::value>(c, p.w[IMG_LOGITS_W], p.w[IMG_LOGITS_B], Z, Hd,
                        [&](int b, int o, float v) { lo[static_cast<size_t>(c.r0 + b) * Z + o] = v; });
    phase_sync<GRID>();
    sample_rows<GRID>(c, p, lo, p.u + static_cast<size_t>(t) * B * S, nxt + D, K0,
                      p.zs + static_cast<size_t>(t) * B * Z, Z);
    phase_sync<GRID>();
    float* sw = cur;
    cur = nxt;
    nxt = sw;
  }
}

template <bool GRID>
__global__ void __launch_bounds__(kThreads, 1) k_self_assess(Params p) {
  METACOG_DYNAMIC_SMEM(smem4);
  const Ctx c = make_ctx<GRID>(p, reinterpret_cast<float*>(smem4));
  const int K0 = p.d.D + p.d.Z;
  float* grad = p.grad;
  sa_forward_backward<GRID>(c, p, false, p.s, p.psi, grad != nullptr,
                            [&](int b, int k, float v) { grad[static_cast<size_t>(c.r0 + b) * K0 + k] = v; });
}

template <bool GRID>
__global__ void __launch_bounds__(kThreads, 1) k_self_regulate(Params p) {
  METACOG_DYNAMIC_SMEM(smem4);
  const Ctx c = make_ctx<GRID>(p, reinterpret_cast<float*>(smem4));
  const Dims& d = p.d;
  const int D = d.D, Z = d.Z, A = d.A, N = d.N, K0 = D + Z, B = p.B;
  float* cur = p.sc.st;
  float* nxt = p.sc.st + static_cast<size_t>(B) * K0;
  float* hp = p.sc.hp;
  init_state<GRID>(c, p, p.h, p.z, cur);
  for (int t = 0; t < p.H; ++t) {
    // line 9: a ~ actor(s); line 10: h = f(s, a), z kept
    mlp_trunk<GRID>(c, p, cur, ACT_W0, p.sc.ya);
    seq_to_gates<GRID>(c, p, cur + D, K0, cur, K0, p.eps + static_cast<size_t>(t) * B * A, nullptr, nullptr);
    // s = [h', z] staged for the sa head; the writer keeps h' for the update
    stage_hnew(c, p, cur, K0, true, 0, hp, D, nullptr, 0);
    stage_copy(c, cur + D, K0, Z, D);
    // line 11: s <- s + beta * d(sum psi)/ds, written into the other state buffer
    const float beta = p.beta;
    float* const cur_c = cur;
    float* const nxt_c = nxt;
    sa_forward_backward<GRID>(c, p, true, nullptr, p.trace ? p.trace + static_cast<size_t>(t) * B * N : nullptr,
                              true, [&](int b, int k, float v) {
                                const size_t row = static_cast<size_t>(c.r0 + b);
                                const float base = k < D ? hp[row * D + k] : cur_c[row * K0 + k];
                                nxt_c[row * K0 + k] = base + beta * v;
                              });
    float* sw = cur;
    cur = nxt;
    nxt = sw;
  }
  // lines 13-14
  mlp_trunk<GRID>(c, p, cur, ACT_W0, p.sc.ya);
  seq_to_gates<GRID>(c, p, cur + D, K0, cur, K0, p.eps + static_cast<size_t>(p.H) * B * A, nullptr, p.a_out);
  stage_hnew(c, p, cur, K0, false, 0, p.h_out, D, nullptr, 0);
}

// ---------------------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------------------

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("rssm_cuda ") + what + ": " + cudaGetErrorString(e));
}

int round4(int x) { return (x + 3) & ~3; }

int kx_of(const Dims& d) {
  int k = d.D + d.Z;
  k = std::max(k, d.Z + d.A);
  k = std::max(k, d.Hd + d.D);
  k = std::max(k, d.D + d.E);
  k = std::max(k, d.Hd);
  return round4(k);
}

void validate(const Dims& d, int B, const std::vector<std::uintptr_t>& w) {
  if (B < 1) throw std::invalid_argument("B: expected a positive batch size");
  if (d.D < 1 || d.Hd < 1 || d.Z < 1 || d.A < 1 || d.L < 1 || d.N < 1 || d.S < 1 || d.C < 1 || d.E < 0)
    throw std::invalid_argument("dims: every size must be positive");
  if (d.S * d.C != d.Z) throw std::invalid_argument("dims: Z must equal S*C");
  if (d.N > kMaxN) throw std::invalid_argument("dims: N (self-assessment outputs) must be <= 16");
  if (static_cast<int>(w.size()) != W_COUNT)
    throw std::invalid_argument("w: expected " + std::to_string(W_COUNT) + " weight pointers, got " +
                                std::to_string(w.size()));
}

Params make_params(const Dims& d, const std::vector<std::uintptr_t>& w, int B, std::uintptr_t ws) {
  Params p{};
  p.d = d;
  p.B = B;
  p.kx = kx_of(d);
  p.rows_alloc = B <= kPersistentMaxB ? B : kRows;
  p.gstride = std::max(d.Hd, d.D + d.Z);
  for (int i = 0; i < W_COUNT; ++i) p.w[i] = reinterpret_cast<const float*>(w[i]);
  float* base = reinterpret_cast<float*>(ws);
  auto take = [&](std::size_t n) {
    float* r = base;
    base += (n + 3) & ~std::size_t(3);  // keep 16-byte alignment
    return r;
  };
  const std::size_t Bs = B, K0 = d.D + d.Z;
  p.sc.ya = take(d.L * Bs * d.Hd);
  p.sc.yi = take(Bs * d.Hd);
  p.sc.gg = take(Bs * 3 * d.D);
  p.sc.hp = take(Bs * d.D);
  p.sc.ys = take(d.L * Bs * d.Hd);
  p.sc.gx = take(2 * Bs * p.gstride);
  p.sc.st = take(2 * Bs * K0);
  p.sc.yo = take(Bs * d.Hd);
  p.sc.lo = take(Bs * d.Z);
  return p;
}

std::size_t smem_bytes(const Params& p) {
  return sizeof(float) * static_cast<std::size_t>(p.rows_alloc) * (p.kx + p.d.Hd + kMaxN);
}

struct DeviceFacts {
  int sms = 0;
  bool coop = false;
};

DeviceFacts device_facts() {
  static std::mutex mu;
  static std::unordered_map<int, DeviceFacts> cache;
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it != cache.end()) return it->second;
  DeviceFacts f;
  check(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, dev), "SM count");
  int coop = 0;
  check(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev), "cooperative launch attribute");
  f.coop = coop != 0;
  cache[dev] = f;
  return f;
}

// Per (kernel, shared bytes): dynamic shared memory opted in and blocks per SM, computed once.
int prepare_kernel(const void* k, std::size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<const void*, std::size_t>, int> cache;
  int dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(k, smem + (static_cast<std::size_t>(dev) << 48));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  check(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "shared memory size (model too wide for one block's staging)");
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, smem), "occupancy");
  cache[key] = per_sm;
  return per_sm;
}

// Launch kernel kg (GRID, cooperative, one block per SM) for small B, else kb (BLOCK).
void launch(void (*kg)(Params), void (*kb)(Params), Params& p, std::uintptr_t stream) {
  const std::size_t smem = smem_bytes(p);
  cudaStream_t st = reinterpret_cast<cudaStream_t>(stream);
  const bool grid_mode = p.B <= kPersistentMaxB;
  const void* k = reinterpret_cast<const void*>(grid_mode ? kg : kb);
  const int per_sm = prepare_kernel(k, smem);
  if (per_sm < 1) throw std::runtime_error("rssm_cuda: a block of this model does not fit on one SM");
  if (grid_mode) {
    const DeviceFacts f = device_facts();
    if (!f.coop) throw std::runtime_error("rssm_cuda: this device does not support cooperative launches");
    void* args[] = {&p};
    check(cudaLaunchCooperativeKernel(k, dim3(f.sms), dim3(kThreads), args, smem, st), "cooperative launch");
  } else {
    const int blocks = (p.B + kRows - 1) / kRows;
    void* args[] = {&p};
    check(cudaLaunchKernel(k, dim3(blocks), dim3(kThreads), args, smem, st), "launch");
  }
}

}  // namespace

std::size_t workspace_floats(const Dims& d, int B) {
  const std::size_t Bs = B, K0 = d.D + d.Z, G = std::max(d.Hd, d.D + d.Z);
  auto r4 = [](std::size_t n) { return (n + 3) & ~std::size_t(3); };
  return r4(d.L * Bs * d.Hd) + r4(Bs * d.Hd) + r4(Bs * 3 * d.D) + r4(Bs * d.D) + r4(d.L * Bs * d.Hd) +
         r4(2 * Bs * G) + r4(2 * Bs * K0) + r4(Bs * d.Hd) + r4(Bs * d.Z);
}

void img_step(const Dims& d, const std::vector<std::uintptr_t>& w, int B, std::uintptr_t h, std::uintptr_t z,
              std::uintptr_t a, std::uintptr_t u, std::uintptr_t embed, bool obs, std::uintptr_t h_out,
              std::uintptr_t z_out, std::uintptr_t logits_out, std::uintptr_t ws, std::uintptr_t stream) {
  validate(d, B, w);
  if (obs && (d.E < 1 || embed == 0)) throw std::invalid_argument("embed: obs_step needs an embedding [B, E]");
  Params p = make_params(d, w, B, ws);
  p.obs = obs;
  p.h = reinterpret_cast<const float*>(h);
  p.z = reinterpret_cast<const float*>(z);
  p.a = reinterpret_cast<const float*>(a);
  p.u = reinterpret_cast<const float*>(u);
  p.embed = reinterpret_cast<const float*>(embed);
  p.h_out = reinterpret_cast<float*>(h_out);
  p.z_out = reinterpret_cast<float*>(z_out);
  p.lo_out = reinterpret_cast<float*>(logits_out);
  launch(k_img_step<true>, k_img_step<false>, p, stream);
}

void imagine(const Dims& d, const std::vector<std::uintptr_t>& w, int B, int H, std::uintptr_t h0, std::uintptr_t z0,
             std::uintptr_t eps, std::uintptr_t u, std::uintptr_t hs, std::uintptr_t zs, std::uintptr_t acts,
             std::uintptr_t ws, std::uintptr_t stream) {
  validate(d, B, w);
  if (H < 1) throw std::invalid_argument("H: expected a positive horizon");
  Params p = make_params(d, w, B, ws);
  p.H = H;
  p.h = reinterpret_cast<const float*>(h0);
  p.z = reinterpret_cast<const float*>(z0);
  p.eps = reinterpret_cast<const float*>(eps);
  p.u = reinterpret_cast<const float*>(u);
  p.hs = reinterpret_cast<float*>(hs);
  p.zs = reinterpret_cast<float*>(zs);
  p.acts = reinterpret_cast<float*>(acts);
  launch(k_imagine<true>, k_imagine<false>, p, stream);
}

void self_assess(const Dims& d, const std::vector<std::uintptr_t>& w, int B, std::uintptr_t s, std::uintptr_t psi,
                 std::uintptr_t grad, std::uintptr_t ws, std::uintptr_t stream) {
  validate(d, B, w);
  Params p = make_params(d, w, B, ws);
  p.s = reinterpret_cast<const float*>(s);
  p.psi = reinterpret_cast<float*>(psi);
  p.grad = reinterpret_cast<float*>(grad);
  launch(k_self_assess<true>, k_self_assess<false>, p, stream);
}

void self_regulate(const Dims& d, const std::vector<std::uintptr_t>& w, int B, int H, float beta, std::uintptr_t h,
                   std::uintptr_t z, std::uintptr_t eps, std::uintptr_t a_out, std::uintptr_t h_out,
                   std::uintptr_t trace, std::uintptr_t ws, std::uintptr_t stream) {
  validate(d, B, w);
  if (H < 0) throw std::invalid_argument("H: expected a non-negative number of iterations");
  Params p = make_params(d, w, B, ws);
  p.H = H;
  p.beta = beta;
  p.h = reinterpret_cast<const float*>(h);
  p.z = reinterpret_cast<const float*>(z);
  p.eps = reinterpret_cast<const float*>(eps);
  p.a_out = reinterpret_cast<float*>(a_out);
  p.h_out = reinterpret_cast<float*>(h_out);
  p.trace = reinterpret_cast<float*>(trace);
  launch(k_self_regulate<true>, k_self_regulate<false>, p, stream);
}

}  // namespace cuda_rssm
}  // namespace metacog

#ifdef METACOG_CUDA_HOST_EMULATION
#include "cuda/host_emulation_api.cuh"
#endif
