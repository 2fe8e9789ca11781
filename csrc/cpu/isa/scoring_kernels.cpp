// Per-ISA loops for trajectory scoring (docs/design.md §1.3), compiled once per ISA.
//   scoring_gemm_nt:  Y[r, o] (=|+=) sum_i X[r, i] * W[o, i]   with leading dimensions,
//                     so a column block of a weight (the traj or task half of l0.w) is
//                     used in place, never copied.
//   scoring_pool_row: y[d] = sum_t m[t] * X[t, d]  (masked token sum, one row)
// Serial: csrc/cpu/scoring.cpp parallelises over row blocks with OpenMP.
#include <cstddef>
#include <cstdint>

#include "core/isa.h"
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace metacog {
namespace METACOG_ISA {

namespace {

inline float dot_scalar(const float* a, const float* b, std::int64_t n) {
  float s = 0.f;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

#if defined(__AVX512F__)
// 4 rows of X against 4 rows of W: 16 accumulators, each loaded vector used 4 times.
inline void tile4x4(const float* W, std::int64_t ldw, const float* X, std::int64_t ldx, std::int64_t in,
                    float out[4][4]) {
  __m512 acc[4][4];
  for (int r = 0; r < 4; ++r)
    for (int o = 0; o < 4; ++o) acc[r][o] = _mm512_setzero_ps();
  std::int64_t i = 0;
  for (; i + 16 <= in; i += 16) {
    __m512 w[4], x[4];
    for (int o = 0; o < 4; ++o) w[o] = _mm512_loadu_ps(W + o * ldw + i);
    for (int r = 0; r < 4; ++r) x[r] = _mm512_loadu_ps(X + r * ldx + i);
    for (int r = 0; r < 4; ++r)
      for (int o = 0; o < 4; ++o) acc[r][o] = _mm512_fmadd_ps(x[r], w[o], acc[r][o]);
  }
  if (i < in) {
    __mmask16 m = static_cast<__mmask16>((1u << (in - i)) - 1u);
    __m512 w[4], x[4];
    for (int o = 0; o < 4; ++o) w[o] = _mm512_maskz_loadu_ps(m, W + o * ldw + i);
    for (int r = 0; r < 4; ++r) x[r] = _mm512_maskz_loadu_ps(m, X + r * ldx + i);
    for (int r = 0; r < 4; ++r)
      for (int o = 0; o < 4; ++o) acc[r][o] = _mm512_fmadd_ps(x[r], w[o], acc[r][o]);
  }
  for (int r = 0; r < 4; ++r)
    for (int o = 0; o < 4; ++o) out[r][o] = _mm512_reduce_add_ps(acc[r][o]);
}

inline float dot_v(const float* a, const float* b, std::int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
  if (i < n) {
    __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), acc);
  }
  return _mm512_reduce_add_ps(acc);
}
#elif defined(__AVX2__)
inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

inline void tile4x4(const float* W, std::int64_t ldw, const float* X, std::int64_t ldx, std::int64_t in,
                    float out[4][4]) {
  __m256 acc[4][4];
  for (int r = 0; r < 4; ++r)
    for (int o = 0; o < 4; ++o) acc[r][o] = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 8 <= in; i += 8) {
    __m256 w[4], x[4];
    for (int o = 0; o < 4; ++o) w[o] = _mm256_loadu_ps(W + o * ldw + i);
    for (int r = 0; r < 4; ++r) x[r] = _mm256_loadu_ps(X + r * ldx + i);
    for (int r = 0; r < 4; ++r)
      for (int o = 0; o < 4; ++o) acc[r][o] = _mm256_fmadd_ps(x[r], w[o], acc[r][o]);
  }
  for (int r = 0; r < 4; ++r)
    for (int o = 0; o < 4; ++o) {
      float s = hsum256(acc[r][o]);
      for (std::int64_t k = i; k < in; ++k) s += X[r * ldx + k] * W[o * ldw + k];
      out[r][o] = s;
    }
}

inline float dot_v(const float* a, const float* b, std::int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  float s = hsum256(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}
#else
inline void tile4x4(const float* W, std::int64_t ldw, const float* X, std::int64_t ldx, std::int64_t in,
                    float out[4][4]) {
  for (int r = 0; r < 4; ++r)
    for (int o = 0; o < 4; ++o) out[r][o] = dot_scalar(X + r * ldx, W + o * ldw, in);
}
inline float dot_v(const float* a, const float* b, std::int64_t n) { return dot_scalar(a, b, n); }
#endif

}  // namespace

// Y[rows, out] (ldy) = or += X[rows, in] (ldx) @ W[out, in]^T (ldw).
void scoring_gemm_nt(const float* W, std::int64_t ldw, const float* X, std::int64_t ldx, float* Y,
                     std::int64_t ldy, std::int64_t rows, std::int64_t out, std::int64_t in, int accumulate) {
  std::int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    std::int64_t o = 0;
    for (; o + 4 <= out; o += 4) {
      float t[4][4];
      tile4x4(W + o * ldw, ldw, X + r * ldx, ldx, in, t);
      for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) {
          float& y = Y[(r + a) * ldy + o + b];
          y = accumulate ? y + t[a][b] : t[a][b];
        }
    }
    for (; o < out; ++o)
      for (int a = 0; a < 4; ++a) {
        float s = dot_v(X + (r + a) * ldx, W + o * ldw, in);
        float& y = Y[(r + a) * ldy + o];
        y = accumulate ? y + s : s;
      }
  }
  for (; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      float s = dot_v(X + r * ldx, W + o * ldw, in);
      float& y = Y[r * ldy + o];
      y = accumulate ? y + s : s;
    }
}

// y[D] = sum_t m[t] * X[t, D]; rows with m[t] == 0 are skipped (padding).
void scoring_pool_row(const float* X, const float* m, std::int64_t T, std::int64_t D, float* y) {
  for (std::int64_t d = 0; d < D; ++d) y[d] = 0.f;
  for (std::int64_t t = 0; t < T; ++t) {
    const float w = m[t];
    if (w == 0.f) continue;
    const float* x = X + t * D;
    std::int64_t d = 0;
#if defined(__AVX512F__)
    const __m512 wv = _mm512_set1_ps(w);
    for (; d + 16 <= D; d += 16)
      _mm512_storeu_ps(y + d, _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + d), _mm512_loadu_ps(y + d)));
#elif defined(__AVX2__)
    const __m256 wv = _mm256_set1_ps(w);
    for (; d + 8 <= D; d += 8)
      _mm256_storeu_ps(y + d, _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + d), _mm256_loadu_ps(y + d)));
#endif
    for (; d < D; ++d) y[d] += w * x[d];
  }
}

METACOG_ISA_EXPORT(scoring_gemm_nt, &scoring_gemm_nt)
METACOG_ISA_EXPORT(scoring_pool_row, &scoring_pool_row)

}  // namespace METACOG_ISA
}  // namespace metacog
