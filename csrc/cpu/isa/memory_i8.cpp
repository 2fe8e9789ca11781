// Memory op: the int8 dot product of the bounded scan (csrc/cpu/memory_bounded.cpp), compiled once
// per ISA (see CMakeLists.txt).
//   dot_i8f32:  sum_i q[i] * float(c[i])   (q float32, c int8: a quarter of the bytes of float keys)
// Serial: the caller parallelises over queries or candidate chunks.
#include <cstdint>

#include "core/isa.h"
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace metacog {
namespace METACOG_ISA {

float dot_i8f32(const float* q, const std::int8_t* c, std::int64_t n) {
  std::int64_t i = 0;
  float s = 0.f;
#if defined(__AVX512F__)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    const __m128i c0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i));
    const __m128i c1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i + 16));
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c0)), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c1)), acc1);
  }
  for (; i + 16 <= n; i += 16) {
    const __m128i c0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i));
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c0)), acc0);
  }
  s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#elif defined(__AVX2__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    const __m128i c01 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(c + i));
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c01)), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8),
                           _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c01, 8))), acc1);
  }
  const __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  s = _mm_cvtss_f32(lo);
#endif
  for (; i < n; ++i) s += q[i] * static_cast<float>(c[i]);
  return s;
}

METACOG_ISA_EXPORT(dot_i8f32, &dot_i8f32)

}  // namespace METACOG_ISA
}  // namespace metacog
