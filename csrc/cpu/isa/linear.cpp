// Dense layer primitives, compiled once per ISA (see CMakeLists.txt).
//   linear_f32:  y[B,out] = x[B,in] @ W[out,in]^T (+ bias[out])
//   dot_f32:     sum_i a[i]*b[i]
// Serial: callers parallelise over batch or output rows with OpenMP.
#include <cstddef>
#include <cstdint>

#include "core/isa.h"
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

METACOG_ISA_EXPORT(dot_f32, &dot_f32)
METACOG_ISA_EXPORT(linear_f32, &linear_f32)

}  // namespace METACOG_ISA
}  // namespace metacog
