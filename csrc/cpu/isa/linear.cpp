// Dense layer primitives, compiled once per ISA (see CMakeLists.txt).
//   linear_f32:        y[B,out] = x[B,in] @ W[out,in]^T (+ bias[out])
//   dot_f32:           sum_i a[i]*b[i]
//   gemm_packed_f32:   Y[M, c0:c1] (+)= X[M,K] @ P[K, c0:c1] (+ bias), P packed in panels (cpu/linear.h)
//   gemm_packed_bf16:  the same with bf16 weight pairs and bf16-rounded X, fp32 accumulation
//                      (AVX512-BF16 dot products where compiled, exact emulation elsewhere)
// Serial: callers parallelise over batch or output rows with OpenMP.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/isa.h"
#include "cpu/isa/rssm_simd.h"
#include "cpu/linear.h"
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace metacog {
namespace METACOG_ISA {

#if defined(__AVX512F__)
static inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }
#endif
#if defined(__AVX2__)
static inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
#endif

float dot_f32(const float* a, const float* b, std::int64_t n) {
  std::int64_t i = 0;
  float s = 0.f;
#if defined(__AVX512F__)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  if (i < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    acc1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc1);
    i = n;
  }
  s = hsum(_mm512_add_ps(acc0, acc1));
#elif defined(__AVX2__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  s = hsum256(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Four output rows against one input row: the weight stream is read once per
// 4 outputs and the input row stays in registers/L1.
static inline void rows4(const float* W, std::int64_t in, const float* x, float* out4) {
  const float* w0 = W;
  const float* w1 = W + in;
  const float* w2 = W + 2 * in;
  const float* w3 = W + 3 * in;
  std::int64_t i = 0;
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#if defined(__AVX512F__)
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
  for (; i + 16 <= in; i += 16) {
    __m512 xv = _mm512_loadu_ps(x + i);
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w0 + i), xv, a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w1 + i), xv, a1);
    a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w2 + i), xv, a2);
    a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w3 + i), xv, a3);
  }
  if (i < in) {
    __mmask16 m = static_cast<__mmask16>((1u << (in - i)) - 1u);
    __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w0 + i), xv, a0);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w1 + i), xv, a1);
    a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w2 + i), xv, a2);
    a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w3 + i), xv, a3);
    i = in;
  }
  s0 = hsum(a0); s1 = hsum(a1); s2 = hsum(a2); s3 = hsum(a3);
#elif defined(__AVX2__)
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (; i + 8 <= in; i += 8) {
    __m256 xv = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + i), xv, a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + i), xv, a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + i), xv, a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + i), xv, a3);
  }
  s0 = hsum256(a0); s1 = hsum256(a1); s2 = hsum256(a2); s3 = hsum256(a3);
#endif
  for (; i < in; ++i) {
    s0 += w0[i] * x[i]; s1 += w1[i] * x[i]; s2 += w2[i] * x[i]; s3 += w3[i] * x[i];
  }
  out4[0] = s0; out4[1] = s1; out4[2] = s2; out4[3] = s3;
}

void linear_f32(const float* W, const float* bias, const float* x, float* y, std::int64_t B,
                std::int64_t out, std::int64_t in) {
  for (std::int64_t b = 0; b < B; ++b) {
    const float* xb = x + b * in;
    float* yb = y + b * out;
    std::int64_t o = 0;
    for (; o + 4 <= out; o += 4) rows4(W + o * in, in, xb, yb + o);
    for (; o < out; ++o) yb[o] = dot_f32(W + o * in, xb, in);
    if (bias)
      for (std::int64_t k = 0; k < out; ++k) yb[k] += bias[k];
  }
}

// ---------------------------------------------------------------------------
// Small-GEMM micro-kernels on packed panels.
// A micro-kernel keeps MR rows x NV vectors of Y in registers and streams one
// panel row (NV*W weights) per k: NV loads + MR broadcasts per MR*NV FMAs.
// ---------------------------------------------------------------------------
namespace {

using simd::V;
using simd::W;

#if defined(__AVX512F__)
constexpr int kMR = 4;
#elif defined(__AVX2__)
constexpr int kMR = 3;
#else
constexpr int kMR = 2;
#endif
constexpr int kNV = 4;

template <int MR, int NV>
inline void finish(V (&a)[MR][NV], float* Y, std::int64_t ldy, std::int64_t col, std::int64_t c1,
                   const float* bias, int accumulate) {
  for (int v = 0; v < NV; ++v) {
    const std::int64_t cc = col + v * W;
    if (cc >= c1) break;
    const int n = static_cast<int>(c1 - cc < W ? c1 - cc : W);
    V b = simd::zero();
    if (bias) b = n == W ? simd::load(bias + cc) : simd::load_n(bias + cc, n);
    for (int r = 0; r < MR; ++r) {
      float* y = Y + r * ldy + cc;
      V val = simd::add(a[r][v], b);
      if (accumulate) val = simd::add(val, n == W ? simd::load(y) : simd::load_n(y, n));
      if (n == W)
        simd::store(y, val);
      else
        simd::store_n(y, val, n);
    }
  }
}

template <int MR, int NV>
inline void mk_f32(const float* Pp, std::int64_t K, const float* X, std::int64_t ldx, float* Y,
                   std::int64_t ldy, std::int64_t col, std::int64_t c1, const float* bias, int accumulate) {
  V a[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) a[r][v] = simd::zero();
  const float* p = Pp;
  for (std::int64_t k = 0; k < K; ++k, p += kPanel) {
    V w[NV];
    for (int v = 0; v < NV; ++v) w[v] = simd::load(p + v * W);
    for (int r = 0; r < MR; ++r) {
      V x = simd::set1(X[r * ldx + k]);
      for (int v = 0; v < NV; ++v) a[r][v] = simd::fma(x, w[v], a[r][v]);
    }
  }
  finish<MR, NV>(a, Y, ldy, col, c1, bias, accumulate);
}

// Pairs of bf16 weights (k even in the low half) against a bf16 pair of x.
template <int MR, int NV>
inline void mk_bf16(const std::uint16_t* Pp, std::int64_t K2, const std::uint32_t* Xb, std::int64_t ldxb,
                    float* Y, std::int64_t ldy, std::int64_t col, std::int64_t c1, const float* bias,
                    int accumulate) {
  V a[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) a[r][v] = simd::zero();
  const std::uint16_t* p = Pp;
  for (std::int64_t k2 = 0; k2 < K2; ++k2, p += 2 * kPanel) {
#if defined(__AVX512BF16__)
    __m512bh w[NV];
    for (int v = 0; v < NV; ++v) w[v] = (__m512bh)_mm512_loadu_si512(p + v * 2 * W);
    for (int r = 0; r < MR; ++r) {
      __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(Xb[r * ldxb + k2]));
      for (int v = 0; v < NV; ++v) a[r][v] = _mm512_dpbf16_ps(a[r][v], w[v], x);
    }
#elif defined(__AVX512F__)
    V wlo[NV], whi[NV];
    const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    for (int v = 0; v < NV; ++v) {
      __m512i wi = _mm512_loadu_si512(p + v * 2 * W);
      wlo[v] = _mm512_castsi512_ps(_mm512_slli_epi32(wi, 16));
      whi[v] = _mm512_castsi512_ps(_mm512_and_si512(wi, hi_mask));
    }
    for (int r = 0; r < MR; ++r) {
      const std::uint32_t xp = Xb[r * ldxb + k2];
      V x0 = simd::set1(bf16_to_f32(static_cast<std::uint16_t>(xp & 0xffffu)));
      V x1 = simd::set1(bf16_to_f32(static_cast<std::uint16_t>(xp >> 16)));
      for (int v = 0; v < NV; ++v) a[r][v] = simd::fma(x1, whi[v], simd::fma(x0, wlo[v], a[r][v]));
    }
#elif defined(__AVX2__)
    V wlo[NV], whi[NV];
    const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    for (int v = 0; v < NV; ++v) {
      __m256i wi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + v * 2 * W));
      wlo[v] = _mm256_castsi256_ps(_mm256_slli_epi32(wi, 16));
      whi[v] = _mm256_castsi256_ps(_mm256_and_si256(wi, hi_mask));
    }
    for (int r = 0; r < MR; ++r) {
      const std::uint32_t xp = Xb[r * ldxb + k2];
      V x0 = simd::set1(bf16_to_f32(static_cast<std::uint16_t>(xp & 0xffffu)));
      V x1 = simd::set1(bf16_to_f32(static_cast<std::uint16_t>(xp >> 16)));
      for (int v = 0; v < NV; ++v) a[r][v] = simd::fma(x1, whi[v], simd::fma(x0, wlo[v], a[r][v]));
    }
#else
    for (int r = 0; r < MR; ++r) {
      const std::uint32_t xp = Xb[r * ldxb + k2];
      const float x0 = bf16_to_f32(static_cast<std::uint16_t>(xp & 0xffffu));
      const float x1 = bf16_to_f32(static_cast<std::uint16_t>(xp >> 16));
      for (int v = 0; v < NV; ++v)
        for (int i = 0; i < W; ++i) {
          const std::uint16_t* q = p + (v * W + i) * 2;
          a[r][v].v[i] += bf16_to_f32(q[0]) * x0 + bf16_to_f32(q[1]) * x1;
        }
    }
#endif
  }
  finish<MR, NV>(a, Y, ldy, col, c1, bias, accumulate);
}

// Calls F<MR, nv>(...) for nv = min(kNV, vectors still needed) so that narrow
// outputs (the 2A-wide actor head, the N=5 SA head) skip the zero padding.
template <int MR, class Fn>
inline void with_nv(std::int64_t remaining_cols, Fn&& fn) {
  const std::int64_t nv = (remaining_cols + W - 1) / W;
  if (nv >= kNV) fn(std::integral_constant<int, kNV>{});
  else if (nv == 3) fn(std::integral_constant<int, 3>{});
  else if (nv == 2) fn(std::integral_constant<int, 2>{});
  else fn(std::integral_constant<int, 1>{});
}

}  // namespace

void gemm_packed_f32(const float* P, std::int64_t K, const float* X, std::int64_t ldx, float* Y,
                     std::int64_t ldy, std::int64_t M, std::int64_t c0, std::int64_t c1, const float* bias,
                     int accumulate) {
  for (std::int64_t c = c0; c < c1; c += kPanel) {
    const float* Pp = P + (c / kPanel) * K * kPanel;
    for (std::int64_t j = 0; j < kPanel && c + j < c1; j += kNV * W) {
      const std::int64_t col = c + j;
      with_nv<kMR>(c1 - col, [&](auto nvc) {
        constexpr int NV = decltype(nvc)::value;
        std::int64_t m = 0;
        for (; m + kMR <= M; m += kMR)
          mk_f32<kMR, NV>(Pp + j, K, X + m * ldx, ldx, Y + m * ldy, ldy, col, c1, bias, accumulate);
        for (; m < M; ++m) mk_f32<1, NV>(Pp + j, K, X + m * ldx, ldx, Y + m * ldy, ldy, col, c1, bias, accumulate);
      });
    }
  }
}

void gemm_packed_bf16(const std::uint16_t* P, std::int64_t K, const float* X, std::int64_t ldx, float* Y,
                      std::int64_t ldy, std::int64_t M, std::int64_t c0, std::int64_t c1, const float* bias,
                      int accumulate) {
  const std::int64_t K2 = (K + 1) / 2;
  // x rounded to bf16 pairs once per call; the buffer only grows (no allocation in steady state)
  static thread_local std::vector<std::uint32_t> xb;
  if (xb.size() < static_cast<std::size_t>(M * K2)) xb.resize(static_cast<std::size_t>(M * K2));
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t k2 = 0; k2 < K2; ++k2) {
      const std::int64_t k = 2 * k2;
      const std::uint32_t lo = f32_to_bf16(X[m * ldx + k]);
      const std::uint32_t hi = k + 1 < K ? f32_to_bf16(X[m * ldx + k + 1]) : 0u;
      xb[m * K2 + k2] = lo | (hi << 16);
    }
  const std::uint32_t* Xb = xb.data();
  for (std::int64_t c = c0; c < c1; c += kPanel) {
    const std::uint16_t* Pp = P + (c / kPanel) * K2 * kPanel * 2;
    for (std::int64_t j = 0; j < kPanel && c + j < c1; j += kNV * W) {
      const std::int64_t col = c + j;
      with_nv<kMR>(c1 - col, [&](auto nvc) {
        constexpr int NV = decltype(nvc)::value;
        std::int64_t m = 0;
        for (; m + kMR <= M; m += kMR)
          mk_bf16<kMR, NV>(Pp + 2 * j, K2, Xb + m * K2, K2, Y + m * ldy, ldy, col, c1, bias, accumulate);
        for (; m < M; ++m)
          mk_bf16<1, NV>(Pp + 2 * j, K2, Xb + m * K2, K2, Y + m * ldy, ldy, col, c1, bias, accumulate);
      });
    }
  }
}

namespace {
// acc[0:64] of one panel -> Y[c : min(c+64, c1)] (+ bias) (+ Y when accumulating)
inline void store_panel(const float* acc, float* y, const float* bias, std::int64_t c, std::int64_t c1, int accumulate) {
  for (std::int64_t v = 0; v < kPanel / W; ++v) {
    const std::int64_t cc = c + v * W;
    if (cc >= c1) break;
    const int n = static_cast<int>(c1 - cc < W ? c1 - cc : W);
    V val = simd::load(acc + v * W);
    if (bias) val = simd::add(val, n == W ? simd::load(bias + cc) : simd::load_n(bias + cc, n));
    if (accumulate) val = simd::add(val, n == W ? simd::load(y + cc) : simd::load_n(y + cc, n));
    if (n == W)
      simd::store(y + cc, val);
    else
      simd::store_n(y + cc, val, n);
  }
}
}  // namespace

void gather_packed_f32(const float* P, std::int64_t K, const std::int32_t* idx, std::int64_t nsel, float* Y,
                       std::int64_t ldy, std::int64_t M, std::int64_t c0, std::int64_t c1, const float* bias,
                       int accumulate) {
  alignas(64) float acc[kPanel];
  for (std::int64_t m = 0; m < M; ++m) {
    const std::int32_t* ix = idx + m * nsel;
    for (std::int64_t c = c0; c < c1; c += kPanel) {
      const float* Pp = P + (c / kPanel) * K * kPanel;
      V a[kPanel / W];
      for (auto& v : a) v = simd::zero();
      for (std::int64_t j = 0; j < nsel; ++j) {
        const float* row = Pp + static_cast<std::int64_t>(ix[j]) * kPanel;
        for (std::int64_t v = 0; v < kPanel / W; ++v) a[v] = simd::add(a[v], simd::load(row + v * W));
      }
      for (std::int64_t v = 0; v < kPanel / W; ++v) simd::store(acc + v * W, a[v]);
      store_panel(acc, Y + m * ldy, bias, c, c1, accumulate);
    }
  }
}

void gather_packed_bf16(const std::uint16_t* P, std::int64_t K, const std::int32_t* idx, std::int64_t nsel, float* Y,
                        std::int64_t ldy, std::int64_t M, std::int64_t c0, std::int64_t c1, const float* bias,
                        int accumulate) {
  const std::int64_t K2 = (K + 1) / 2;
  alignas(64) float acc[kPanel];
  for (std::int64_t m = 0; m < M; ++m) {
    const std::int32_t* ix = idx + m * nsel;
    for (std::int64_t c = c0; c < c1; c += kPanel) {
      const std::uint16_t* Pp = P + (c / kPanel) * K2 * kPanel * 2;
      for (std::int64_t j = 0; j < kPanel; ++j) acc[j] = 0.f;
      for (std::int64_t j = 0; j < nsel; ++j) {
        const std::int64_t k = ix[j];
        const std::uint16_t* row = Pp + (k >> 1) * kPanel * 2 + (k & 1);
        for (std::int64_t q = 0; q < kPanel; ++q) acc[q] += bf16_to_f32(row[2 * q]);
      }
      store_panel(acc, Y + m * ldy, bias, c, c1, accumulate);
    }
  }
}

METACOG_ISA_EXPORT(gather_packed_f32, &gather_packed_f32)
METACOG_ISA_EXPORT(gather_packed_bf16, &gather_packed_bf16)

METACOG_ISA_EXPORT(gemm_packed_f32, &gemm_packed_f32)
METACOG_ISA_EXPORT(gemm_packed_bf16, &gemm_packed_bf16)

METACOG_ISA_EXPORT(dot_f32, &dot_f32)
METACOG_ISA_EXPORT(linear_f32, &linear_f32)

}  // namespace METACOG_ISA
}  // namespace metacog
