// Row-wise loops of the int8 MiniLM encoder (metacog_fast/scoring/int8_bert.py), compiled once per
// ISA. csrc/cpu/encoder.cpp runs them over rows / (text, head) pairs with OpenMP; the GEMMs
// themselves are int8 x int8 -> int32 (torch._int_mm, oneDNN VNNI) between these calls.
//   enc_quantize_row        x[K] f32 -> q[K] int8, asymmetric: x ~ scale * q + zero,
//                           scale = (max - min) / 255, zero = (max + min) / 2
//   enc_dequantize_row      y[N] = acc[N] * (scale * w_scale) + (zero * w_colsum + bias) [then GELU]
//   enc_dequantize_add_ln   res[N] = LayerNorm(dequantized acc + res) * gamma + beta   (in place)
//   enc_attention_head      softmax(q k^T / sqrt(d), keys < length) v for one text and one head
// The readable torch versions are in metacog_fast/kernels/reference/encoder.py.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/isa.h"
#include "cpu/isa/rssm_simd.h"

namespace metacog {
namespace METACOG_ISA {

using simd::V;
using simd::W;

namespace {

inline V load_i32(const std::int32_t* p) {
#if defined(__AVX512F__)
  return _mm512_cvtepi32_ps(_mm512_loadu_si512(p));
#elif defined(__AVX2__)
  return _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#else
  float f[W];
  for (int i = 0; i < W; ++i) f[i] = static_cast<float>(p[i]);
  return simd::load(f);
#endif
}

inline V load_i32_n(const std::int32_t* p, int n) {
  float f[W] = {};
  for (int i = 0; i < n; ++i) f[i] = static_cast<float>(p[i]);
  return simd::load(f);
}

// Horizontal max (sign 1) or min (sign -1) of the lanes.
template <int sign>
inline float hextreme(V v) {
  float f[W];
  simd::store(f, v);
  float m = f[0];
  for (int i = 1; i < W; ++i) m = sign > 0 ? std::max(m, f[i]) : std::min(m, f[i]);
  return m;
}
inline float hmax(V v) { return hextreme<1>(v); }
inline float hmin(V v) { return hextreme<-1>(v); }

inline V lane_index() {
  float f[W];
  for (int i = 0; i < W; ++i) f[i] = static_cast<float>(i);
  return simd::load(f);
}

// erf by Abramowitz & Stegun 7.1.26 (absolute error <= 1.5e-7), with the vector exp.
inline V erf_v(V x) {
  V a = simd::vabs(x);
  V t = simd::div(simd::set1(1.f), simd::fma(simd::set1(0.3275911f), a, simd::set1(1.f)));
  V p = simd::set1(1.061405429f);
  p = simd::fma(p, t, simd::set1(-1.453152027f));
  p = simd::fma(p, t, simd::set1(1.421413741f));
  p = simd::fma(p, t, simd::set1(-0.284496736f));
  p = simd::fma(p, t, simd::set1(0.254829592f));
  p = simd::mul(p, t);
  V e = simd::exp(simd::sub(simd::zero(), simd::mul(a, a)));
  V y = simd::fnma(p, e, simd::set1(1.f));
  return simd::copysign_v(y, x);
}

// GELU as BERT uses it: 0.5 x (1 + erf(x / sqrt 2)).
inline V gelu_v(V x) {
  V e = erf_v(simd::mul(x, simd::set1(0.70710678118654752f)));
  return simd::mul(simd::mul(simd::set1(0.5f), x), simd::add(simd::set1(1.f), e));
}

}  // namespace

void enc_quantize_row(const float* x, std::int64_t K, std::int8_t* q, float* scale, float* zero) {
  V lo = simd::set1(INFINITY), hi = simd::set1(-INFINITY);
  std::int64_t i = 0;
  for (; i + W <= K; i += W) {
    V v = simd::load(x + i);
    lo = simd::vmin(lo, v);
    hi = simd::vmax(hi, v);
  }
  float mn = hmin(lo), mx = hmax(hi);
  for (; i < K; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  float s = (mx - mn) / 255.f;
  if (!(s > 0.f)) s = 1.f;  // a constant row: every value equals zero, q = 0
  const float z = (mx + mn) * 0.5f;
  const float inv = 1.f / s;
  *scale = s;
  *zero = z;
  const V vz = simd::set1(z), vinv = simd::set1(inv), vlo = simd::set1(-128.f), vhi = simd::set1(127.f);
  float f[W];
  for (i = 0; i + W <= K; i += W) {
    V r = simd::round_nearest(simd::mul(simd::sub(simd::load(x + i), vz), vinv));
    r = simd::vmin(simd::vmax(r, vlo), vhi);
#if defined(__AVX512F__)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)));
#else
    simd::store(f, r);
    for (int k = 0; k < W; ++k) q[i + k] = static_cast<std::int8_t>(f[k]);
#endif
  }
  for (; i < K; ++i) {
    float r = std::nearbyint((x[i] - z) * inv);
    q[i] = static_cast<std::int8_t>(std::min(127.f, std::max(-128.f, r)));
  }
  (void)f;
}

void enc_dequantize_row(const std::int32_t* acc, std::int64_t N, float s, float z, const float* ws,
                        const float* cs, const float* b, int gelu, float* y) {
  const V vs = simd::set1(s), vz = simd::set1(z);
  std::int64_t i = 0;
  for (; i + W <= N; i += W) {
    V off = simd::fma(vz, simd::load(cs + i), simd::load(b + i));
    V v = simd::fma(load_i32(acc + i), simd::mul(vs, simd::load(ws + i)), off);
    simd::store(y + i, gelu ? gelu_v(v) : v);
  }
  if (i < N) {
    const int n = static_cast<int>(N - i);
    V off = simd::fma(vz, simd::load_n(cs + i, n), simd::load_n(b + i, n));
    V v = simd::fma(load_i32_n(acc + i, n), simd::mul(vs, simd::load_n(ws + i, n)), off);
    simd::store_n(y + i, gelu ? gelu_v(v) : v, n);
  }
}

void enc_dequantize_add_ln(const std::int32_t* acc, std::int64_t N, float s, float z, const float* ws,
                           const float* cs, const float* b, float* res, const float* gamma, const float* beta,
                           float eps) {
  const V vs = simd::set1(s), vz = simd::set1(z);
  V sum = simd::zero();
  std::int64_t i = 0;
  for (; i + W <= N; i += W) {
    V off = simd::fma(vz, simd::load(cs + i), simd::load(b + i));
    V v = simd::add(simd::fma(load_i32(acc + i), simd::mul(vs, simd::load(ws + i)), off), simd::load(res + i));
    simd::store(res + i, v);
    sum = simd::add(sum, v);
  }
  if (i < N) {
    const int n = static_cast<int>(N - i);
    V off = simd::fma(vz, simd::load_n(cs + i, n), simd::load_n(b + i, n));
    V v = simd::add(simd::fma(load_i32_n(acc + i, n), simd::mul(vs, simd::load_n(ws + i, n)), off),
                    simd::load_n(res + i, n));
    simd::store_n(res + i, v, n);
    sum = simd::add(sum, v);  // lanes past n are 0
  }
  const float mean = simd::hsum(sum) / static_cast<float>(N);
  V sq = simd::zero(), vm = simd::set1(mean);
  for (i = 0; i + W <= N; i += W) {
    V d = simd::sub(simd::load(res + i), vm);
    sq = simd::fma(d, d, sq);
  }
  float var = simd::hsum(sq);
  for (; i < N; ++i) var += (res[i] - mean) * (res[i] - mean);
  const float rstd = 1.f / std::sqrt(var / static_cast<float>(N) + eps);
  const V vr = simd::set1(rstd);
  for (i = 0; i + W <= N; i += W) {
    V xh = simd::mul(simd::sub(simd::load(res + i), vm), vr);
    simd::store(res + i, simd::fma(xh, simd::load(gamma + i), simd::load(beta + i)));
  }
  for (; i < N; ++i) res[i] = (res[i] - mean) * rstd * gamma[i] + beta[i];
}

// Softmax over sc[0, L) in place (unnormalised exp); returns 1 / sum.
inline float softmax_row(float* sc, std::int64_t L) {
  V mx = simd::set1(-INFINITY);
  std::int64_t j = 0;
  for (; j + W <= L; j += W) mx = simd::vmax(mx, simd::load(sc + j));
  float m = hmax(mx);
  for (; j < L; ++j) m = std::max(m, sc[j]);
  const V vm = simd::set1(m);
  V vsum = simd::zero();
  for (j = 0; j + W <= L; j += W) {
    V e = simd::exp(simd::sub(simd::load(sc + j), vm));
    simd::store(sc + j, e);
    vsum = simd::add(vsum, e);
  }
  if (j < L) {
    const int n = static_cast<int>(L - j);
    V e = simd::exp(simd::sub(simd::load_n(sc + j, n), vm));
    simd::store_n(sc + j, e, n);
    vsum = simd::add(vsum, simd::select_lt(simd::set1(static_cast<float>(n - 1) + 0.5f), lane_index(), simd::zero(), e));
  }
  return 1.f / simd::hsum(vsum);
}

// One text, one head. qkv rows are [3, H, d] (the fused Q/K/V projection), out rows [H, d].
// work: at least enc_attention_work floats (csrc/cpu/encoder.cpp). Queries go in groups of
// kRows and keys in kBlocks vectors, so each loaded key / value vector feeds kRows FMAs.
void attention_head_f32(const float* qkv, std::int64_t T, std::int64_t L, std::int64_t H, std::int64_t d,
                        std::int64_t h, float* out, float* work) {
  constexpr int kRows = 4;
  constexpr int kBlocks = 4;
  const std::int64_t Tp = (L + kBlocks * W - 1) / (kBlocks * W) * (kBlocks * W);
  const std::int64_t row = 3 * H * d;
  float* kt = work;              // [d, Tp] keys, transposed, zero past L
  float* vv = kt + d * Tp;       // [L, d] values
  float* sc = vv + L * d;        // [kRows, Tp] scores -> probabilities
  float* qs = sc + kRows * Tp;   // [kRows, d] queries, pre-scaled
  for (std::int64_t c = 0; c < d; ++c) std::fill(kt + c * Tp + L, kt + (c + 1) * Tp, 0.f);
  for (std::int64_t j = 0; j < L; ++j) {
    const float* k = qkv + j * row + (H + h) * d;
    const float* v = qkv + j * row + (2 * H + h) * d;
    for (std::int64_t c = 0; c < d; ++c) kt[c * Tp + j] = k[c];
    std::copy(v, v + d, vv + j * d);
  }
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  for (std::int64_t i0 = 0; i0 < T; i0 += kRows) {
    const std::int64_t nr = std::min<std::int64_t>(kRows, T - i0);
    for (int r = 0; r < kRows; ++r) {  // a short last group repeats its last query
      const float* q = qkv + (i0 + std::min<std::int64_t>(r, nr - 1)) * row + h * d;
      for (std::int64_t c = 0; c < d; ++c) qs[r * d + c] = q[c] * scale;
    }
    for (std::int64_t j0 = 0; j0 < Tp; j0 += kBlocks * W) {
      V acc[kRows][kBlocks];
      for (int r = 0; r < kRows; ++r)
        for (int k = 0; k < kBlocks; ++k) acc[r][k] = simd::zero();
      for (std::int64_t c = 0; c < d; ++c) {
        V kv[kBlocks];
        for (int k = 0; k < kBlocks; ++k) kv[k] = simd::load(kt + c * Tp + j0 + k * W);
        for (int r = 0; r < kRows; ++r) {
          const V qc = simd::set1(qs[r * d + c]);
          for (int k = 0; k < kBlocks; ++k) acc[r][k] = simd::fma(qc, kv[k], acc[r][k]);
        }
      }
      for (int r = 0; r < kRows; ++r)
        for (int k = 0; k < kBlocks; ++k) simd::store(sc + r * Tp + j0 + k * W, acc[r][k]);
    }
    float inv[kRows];
    for (int r = 0; r < kRows; ++r) inv[r] = softmax_row(sc + r * Tp, L);
    if (d % W == 0) {
      for (std::int64_t c0 = 0; c0 < d; c0 += W) {
        V acc[kRows], acc2[kRows];  // two sets: 2 * kRows independent FMA chains
        for (int r = 0; r < kRows; ++r) acc[r] = acc2[r] = simd::zero();
        std::int64_t j = 0;
        for (; j + 2 <= L; j += 2) {
          const V v = simd::load(vv + j * d + c0), v2 = simd::load(vv + (j + 1) * d + c0);
          for (int r = 0; r < kRows; ++r) {
            acc[r] = simd::fma(simd::set1(sc[r * Tp + j]), v, acc[r]);
            acc2[r] = simd::fma(simd::set1(sc[r * Tp + j + 1]), v2, acc2[r]);
          }
        }
        if (j < L) {
          const V v = simd::load(vv + j * d + c0);
          for (int r = 0; r < kRows; ++r) acc[r] = simd::fma(simd::set1(sc[r * Tp + j]), v, acc[r]);
        }
        for (int r = 0; r < nr; ++r)
          simd::store(out + (i0 + r) * H * d + h * d + c0, simd::mul(simd::add(acc[r], acc2[r]), simd::set1(inv[r])));
      }
    } else {
      for (int r = 0; r < nr; ++r) {
        float* o = out + (i0 + r) * H * d + h * d;
        for (std::int64_t c = 0; c < d; ++c) {
          float a = 0.f;
          for (std::int64_t j = 0; j < L; ++j) a += sc[r * Tp + j] * vv[j * d + c];
          o[c] = a * inv[r];
        }
      }
    }
  }
}

#if defined(__AVX512BF16__)
inline std::uint32_t bf16_bits(float x) {  // round to nearest even (inputs are finite)
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}
inline std::uint32_t bf16_pair(float lo, float hi) { return bf16_bits(lo) | (bf16_bits(hi) << 16); }

// The same attention with both products as AVX512-BF16 dot products (vdpbf16ps: pairs of bf16,
// float32 sums): Q, K, V and the probabilities are rounded to bfloat16, as a bf16 GEMM would;
// the scale, mask and softmax stay float32. Needs d % 32 == 0 (MiniLM: d = 32).
void attention_head_bf16(const float* qkv, std::int64_t T, std::int64_t L, std::int64_t H, std::int64_t d,
                         std::int64_t h, float* out, float* work) {
  constexpr int kRows = 4;
  constexpr int kBlocks = 4;
  const std::int64_t Tp = (L + kBlocks * 16 - 1) / (kBlocks * 16) * (kBlocks * 16);
  const std::int64_t d2 = d / 2, L2 = (L + 1) / 2;
  const std::int64_t row = 3 * H * d;
  auto* kp = reinterpret_cast<std::uint32_t*>(work);   // [d/2, Tp] key pairs along d, zero past L
  std::uint32_t* vp = kp + d2 * Tp;                    // [ceil(L/2), d] value pairs along j
  std::uint32_t* qp = vp + L2 * d;                     // [kRows, d/2] query pairs, pre-scaled
  std::uint32_t* pp = qp + kRows * d2;                 // [kRows, Tp/2] probability pairs
  float* sc = reinterpret_cast<float*>(pp + kRows * (Tp / 2));  // [kRows, Tp] scores
  for (std::int64_t c = 0; c < d2; ++c) std::fill(kp + c * Tp + L, kp + (c + 1) * Tp, 0u);
  for (std::int64_t j = 0; j < L; ++j) {
    const float* k = qkv + j * row + (H + h) * d;
    for (std::int64_t c = 0; c < d2; ++c) kp[c * Tp + j] = bf16_pair(k[2 * c], k[2 * c + 1]);
  }
  for (std::int64_t j2 = 0; j2 < L2; ++j2) {
    const float* v0 = qkv + (2 * j2) * row + (2 * H + h) * d;
    const float* v1 = 2 * j2 + 1 < L ? qkv + (2 * j2 + 1) * row + (2 * H + h) * d : nullptr;
    for (std::int64_t c = 0; c < d; ++c) vp[j2 * d + c] = bf16_pair(v0[c], v1 ? v1[c] : 0.f);
  }
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  for (std::int64_t i0 = 0; i0 < T; i0 += kRows) {
    const std::int64_t nr = std::min<std::int64_t>(kRows, T - i0);
    for (int r = 0; r < kRows; ++r) {
      const float* q = qkv + (i0 + std::min<std::int64_t>(r, nr - 1)) * row + h * d;
      for (std::int64_t c = 0; c < d; c += 32) {  // 32 floats -> 16 (even, odd) bf16 pairs
        const __m512 vs = _mm512_set1_ps(scale);
        const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_loadu_ps(q + c + 16), vs),
                                               _mm512_mul_ps(_mm512_loadu_ps(q + c), vs));
        _mm512_storeu_si512(qp + r * d2 + c / 2, (__m512i)b);
      }
    }
    for (std::int64_t j0 = 0; j0 < Tp; j0 += kBlocks * 16) {
      __m512 acc[kRows][kBlocks];
      for (int r = 0; r < kRows; ++r)
        for (int k = 0; k < kBlocks; ++k) acc[r][k] = _mm512_setzero_ps();
      for (std::int64_t c = 0; c < d2; ++c) {
        __m512bh kv[kBlocks];
        for (int k = 0; k < kBlocks; ++k) kv[k] = (__m512bh)_mm512_loadu_si512(kp + c * Tp + j0 + k * 16);
        for (int r = 0; r < kRows; ++r) {
          const __m512bh qb = (__m512bh)_mm512_set1_epi32(static_cast<int>(qp[r * d2 + c]));
          for (int k = 0; k < kBlocks; ++k) acc[r][k] = _mm512_dpbf16_ps(acc[r][k], qb, kv[k]);
        }
      }
      for (int r = 0; r < kRows; ++r)
        for (int k = 0; k < kBlocks; ++k) _mm512_storeu_ps(sc + r * Tp + j0 + k * 16, acc[r][k]);
    }
    float inv[kRows];
    for (int r = 0; r < kRows; ++r) {
      float* s = sc + r * Tp;
      inv[r] = softmax_row(s, L);
      std::fill(s + L, s + Tp, 0.f);  // probabilities past L are 0 (the odd last pair's partner)
      for (std::int64_t j = 0; j < 2 * L2; j += 32) {
        const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + j + 16), _mm512_loadu_ps(s + j));
        _mm512_storeu_si512(pp + r * (Tp / 2) + j / 2, (__m512i)b);
      }
    }
    for (std::int64_t c0 = 0; c0 < d; c0 += 32) {
      __m512 acc[kRows][2];
      for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
      for (std::int64_t j2 = 0; j2 < L2; ++j2) {
        const __m512bh v0 = (__m512bh)_mm512_loadu_si512(vp + j2 * d + c0);
        const __m512bh v1 = (__m512bh)_mm512_loadu_si512(vp + j2 * d + c0 + 16);
        for (int r = 0; r < kRows; ++r) {
          const __m512bh pb = (__m512bh)_mm512_set1_epi32(static_cast<int>(pp[r * (Tp / 2) + j2]));
          acc[r][0] = _mm512_dpbf16_ps(acc[r][0], pb, v0);
          acc[r][1] = _mm512_dpbf16_ps(acc[r][1], pb, v1);
        }
      }
      for (int r = 0; r < nr; ++r) {
        float* o = out + (i0 + r) * H * d + h * d + c0;
        const __m512 sv = _mm512_set1_ps(inv[r]);
        _mm512_storeu_ps(o, _mm512_mul_ps(acc[r][0], sv));
        _mm512_storeu_ps(o + 16, _mm512_mul_ps(acc[r][1], sv));
      }
    }
  }
}
#endif

void enc_attention_head(const float* qkv, std::int64_t T, std::int64_t L, std::int64_t H, std::int64_t d,
                        std::int64_t h, float* out, float* work) {
#if defined(__AVX512BF16__)
  if (d % 32 == 0) return attention_head_bf16(qkv, T, L, H, d, h, out, work);
#endif
  attention_head_f32(qkv, T, L, H, d, h, out, work);
}

METACOG_ISA_EXPORT(enc_quantize_row, &enc_quantize_row)
METACOG_ISA_EXPORT(enc_dequantize_row, &enc_dequantize_row)
METACOG_ISA_EXPORT(enc_dequantize_add_ln, &enc_dequantize_add_ln)
METACOG_ISA_EXPORT(enc_attention_head, &enc_attention_head)

}  // namespace METACOG_ISA
}  // namespace metacog
