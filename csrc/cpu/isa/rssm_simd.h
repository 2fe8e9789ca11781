// Thin SIMD layer for the per-ISA files (included only from csrc/cpu/isa/*.cpp,
// at global scope; it opens metacog::METACOG_ISA::simd itself). One vector type V of W floats:
// __m512 (avx512*), __m256 (avx2) or a plain 8-float struct (generic) that the
// compiler vectorises with SSE. exp/sigmoid/tanh are Cephes-style polynomials
// (max relative error ~2e-7 on the clamped range), so the hot loops never call libm.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace metacog {
namespace METACOG_ISA {
namespace simd {

#if defined(__AVX512F__)
constexpr int W = 16;
using V = __m512;
static inline V zero() { return _mm512_setzero_ps(); }
static inline V set1(float x) { return _mm512_set1_ps(x); }
static inline V load(const float* p) { return _mm512_loadu_ps(p); }
static inline void store(float* p, V v) { _mm512_storeu_ps(p, v); }
static inline __mmask16 tail_mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
static inline V load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(tail_mask(n), p); }
static inline void store_n(float* p, V v, int n) { _mm512_mask_storeu_ps(p, tail_mask(n), v); }
static inline V add(V a, V b) { return _mm512_add_ps(a, b); }
static inline V sub(V a, V b) { return _mm512_sub_ps(a, b); }
static inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
static inline V div(V a, V b) { return _mm512_div_ps(a, b); }
static inline V vmax(V a, V b) { return _mm512_max_ps(a, b); }
static inline V vmin(V a, V b) { return _mm512_min_ps(a, b); }
static inline V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
static inline V fnma(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
static inline float hsum(V v) { return _mm512_reduce_add_ps(v); }
static inline V vabs(V a) { return _mm512_abs_ps(a); }
static inline V round_nearest(V x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline V ldexp_v(V y, V n) { return _mm512_scalef_ps(y, n); }
static inline V select_lt(V a, V b, V if_lt, V otherwise) {  // a < b ? if_lt : otherwise
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), otherwise, if_lt);
}
static inline V copysign_v(V mag, V sgn) {
  const __m512i m = _mm512_set1_epi32(0x80000000);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(m, _mm512_castps_si512(mag)),
                                             _mm512_and_si512(m, _mm512_castps_si512(sgn))));
}
#elif defined(__AVX2__)
constexpr int W = 8;
using V = __m256;
static inline V zero() { return _mm256_setzero_ps(); }
static inline V set1(float x) { return _mm256_set1_ps(x); }
static inline V load(const float* p) { return _mm256_loadu_ps(p); }
static inline void store(float* p, V v) { _mm256_storeu_ps(p, v); }
static inline __m256i tail_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline V load_n(const float* p, int n) { return _mm256_maskload_ps(p, tail_mask(n)); }
static inline void store_n(float* p, V v, int n) { _mm256_maskstore_ps(p, tail_mask(n), v); }
static inline V add(V a, V b) { return _mm256_add_ps(a, b); }
static inline V sub(V a, V b) { return _mm256_sub_ps(a, b); }
static inline V mul(V a, V b) { return _mm256_mul_ps(a, b); }
static inline V div(V a, V b) { return _mm256_div_ps(a, b); }
static inline V vmax(V a, V b) { return _mm256_max_ps(a, b); }
static inline V vmin(V a, V b) { return _mm256_min_ps(a, b); }
static inline V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
static inline V fnma(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
static inline float hsum(V v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
static inline V vabs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline V round_nearest(V x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline V ldexp_v(V y, V n) {
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
static inline V select_lt(V a, V b, V if_lt, V otherwise) {
  return _mm256_blendv_ps(otherwise, if_lt, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
static inline V copysign_v(V mag, V sgn) {
  const V m = _mm256_set1_ps(-0.0f);
  return _mm256_or_ps(_mm256_andnot_ps(m, mag), _mm256_and_ps(m, sgn));
}
#else
constexpr int W = 8;
struct V {
  float v[8];
};
#define SIMD_MAP(expr)            \
  V r;                            \
  for (int i = 0; i < 8; ++i) r.v[i] = (expr); \
  return r;
static inline V zero() { SIMD_MAP(0.f) }
static inline V set1(float x) { SIMD_MAP(x) }
static inline V load(const float* p) { SIMD_MAP(p[i]) }
static inline void store(float* p, V v) { for (int i = 0; i < 8; ++i) p[i] = v.v[i]; }
static inline V load_n(const float* p, int n) { SIMD_MAP(i < n ? p[i] : 0.f) }
static inline void store_n(float* p, V v, int n) { for (int i = 0; i < n; ++i) p[i] = v.v[i]; }
static inline V add(V a, V b) { SIMD_MAP(a.v[i] + b.v[i]) }
static inline V sub(V a, V b) { SIMD_MAP(a.v[i] - b.v[i]) }
static inline V mul(V a, V b) { SIMD_MAP(a.v[i] * b.v[i]) }
static inline V div(V a, V b) { SIMD_MAP(a.v[i] / b.v[i]) }
static inline V vmax(V a, V b) { SIMD_MAP(a.v[i] > b.v[i] ? a.v[i] : b.v[i]) }
static inline V vmin(V a, V b) { SIMD_MAP(a.v[i] < b.v[i] ? a.v[i] : b.v[i]) }
static inline V fma(V a, V b, V c) { SIMD_MAP(a.v[i] * b.v[i] + c.v[i]) }
static inline V fnma(V a, V b, V c) { SIMD_MAP(c.v[i] - a.v[i] * b.v[i]) }
static inline float hsum(V v) {
  float s = 0.f;
  for (int i = 0; i < 8; ++i) s += v.v[i];
  return s;
}
static inline V vabs(V a) { SIMD_MAP(std::fabs(a.v[i])) }
static inline V round_nearest(V x) { SIMD_MAP(std::nearbyint(x.v[i])) }
static inline V ldexp_v(V y, V n) { SIMD_MAP(std::ldexp(y.v[i], static_cast<int>(n.v[i]))) }
static inline V select_lt(V a, V b, V if_lt, V otherwise) { SIMD_MAP(a.v[i] < b.v[i] ? if_lt.v[i] : otherwise.v[i]) }
static inline V copysign_v(V mag, V sgn) { SIMD_MAP(std::copysign(mag.v[i], sgn.v[i])) }
#undef SIMD_MAP
#endif

// exp(x), x clamped to [-87.3, 88.3] (the float range that never overflows).
static inline V exp(V x) {
  x = vmin(vmax(x, set1(-87.3f)), set1(88.3f));
  V n = round_nearest(mul(x, set1(1.44269504088896341f)));
  V r = fnma(n, set1(0.693359375f), x);
  r = fnma(n, set1(-2.12194440e-4f), r);
  V p = set1(1.9875691500e-4f);
  p = fma(p, r, set1(1.3981999507e-3f));
  p = fma(p, r, set1(8.3334519073e-3f));
  p = fma(p, r, set1(4.1665795894e-2f));
  p = fma(p, r, set1(1.6666665459e-1f));
  p = fma(p, r, set1(5.0000001201e-1f));
  V r2 = mul(r, r);
  p = fma(p, r2, add(r, set1(1.f)));
  return ldexp_v(p, n);
}

static inline V sigmoid(V x) { return div(set1(1.f), add(set1(1.f), exp(sub(zero(), x)))); }
static inline V silu(V x) { return mul(x, sigmoid(x)); }

// tanh: Cephes polynomial for |x| < 0.625 (no cancellation near 0), else 1 - 2/(exp(2|x|)+1).
static inline V tanh(V x) {
  V ax = vabs(x);
  V z = mul(x, x);
  V p = set1(-5.70498872745e-3f);
  p = fma(p, z, set1(2.06390887954e-2f));
  p = fma(p, z, set1(-5.37397155531e-2f));
  p = fma(p, z, set1(1.33314422036e-1f));
  p = fma(p, z, set1(-3.33332819422e-1f));
  V small = fma(mul(p, z), x, x);
  V e = exp(add(ax, ax));
  V big = sub(set1(1.f), div(set1(2.f), add(e, set1(1.f))));
  big = copysign_v(big, x);
  return select_lt(ax, set1(0.625f), small, big);
}

// Apply f to n floats in place, full vectors then a masked tail.
template <class F>
static inline void map_inplace(float* x, std::int64_t n, F f) {
  std::int64_t i = 0;
  for (; i + W <= n; i += W) store(x + i, f(load(x + i)));
  if (i < n) store_n(x + i, f(load_n(x + i, static_cast<int>(n - i))), static_cast<int>(n - i));
}

}  // namespace simd
}  // namespace METACOG_ISA
}  // namespace metacog
