// Row-wise hot loops of the RSSM kernels, compiled once per ISA. Each works on
// one batch row; csrc/cpu/rssm.cpp sequences them around the packed GEMMs.
//   rssm_ln          LayerNorm (eps 1e-3) [+ SiLU], optionally saving xhat / pre-activation / rstd
//   rssm_ln_silu_bwd backward of SiLU(LN(y)) wrt y, given the saved xhat, pre-activation and rstd
//   rssm_gru         DreamerV3 GRU gates: r=σ(r), c=tanh(r*c), u=σ(u-1), h' = u*c + (1-u)*h
//   rssm_sample      categorical with unimix, inverse-CDF sample per group -> one-hot
//   rssm_actor_head  a = tanh(mean + (softplus(raw)+0.1)*eps)
//   rssm_sa_head     psi = σ(logit), dpsi = psi*(1-psi)
//   rssm_axpy        y += alpha*x
#include <cmath>
#include <cstdint>

#include "core/isa.h"
#include "cpu/isa/rssm_simd.h"

namespace metacog {
namespace METACOG_ISA {

using simd::V;
using simd::W;

namespace {
constexpr float kLnEps = 1e-3f;
constexpr float kUnimix = 0.01f;
constexpr float kStdMin = 0.1f;

inline float sum_row(const float* x, std::int64_t n) {
  V acc = simd::zero();
  std::int64_t i = 0;
  for (; i + W <= n; i += W) acc = simd::add(acc, simd::load(x + i));
  if (i < n) acc = simd::add(acc, simd::load_n(x + i, static_cast<int>(n - i)));
  return simd::hsum(acc);
}

inline float sqdev_row(const float* x, std::int64_t n, float mean) {
  V acc = simd::zero(), m = simd::set1(mean);
  std::int64_t i = 0;
  for (; i + W <= n; i += W) {
    V d = simd::sub(simd::load(x + i), m);
    acc = simd::fma(d, d, acc);
  }
  float s = simd::hsum(acc);
  for (; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  return s;
}

inline float dot_row(const float* a, const float* b, std::int64_t n) {
  V acc = simd::zero();
  std::int64_t i = 0;
  for (; i + W <= n; i += W) acc = simd::fma(simd::load(a + i), simd::load(b + i), acc);
  float s = simd::hsum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}
}  // namespace

void rssm_ln(float* y, std::int64_t n, const float* g, const float* b, int silu, float* xhat, float* pre,
             float* rstd_out) {
  const float mean = sum_row(y, n) / static_cast<float>(n);
  const float rstd = 1.f / std::sqrt(sqdev_row(y, n, mean) / static_cast<float>(n) + kLnEps);
  if (rstd_out) *rstd_out = rstd;
  const V vm = simd::set1(mean), vr = simd::set1(rstd);
  std::int64_t i = 0;
  auto body = [&](std::int64_t i0, int cnt) {
    const bool full = cnt == W;
    V x = full ? simd::load(y + i0) : simd::load_n(y + i0, cnt);
    V gg = full ? simd::load(g + i0) : simd::load_n(g + i0, cnt);
    V bb = full ? simd::load(b + i0) : simd::load_n(b + i0, cnt);
    V xh = simd::mul(simd::sub(x, vm), vr);
    V v = simd::fma(xh, gg, bb);
    if (xhat) full ? simd::store(xhat + i0, xh) : simd::store_n(xhat + i0, xh, cnt);
    if (pre) full ? simd::store(pre + i0, v) : simd::store_n(pre + i0, v, cnt);
    V out = silu ? simd::silu(v) : v;
    full ? simd::store(y + i0, out) : simd::store_n(y + i0, out, cnt);
  };
  for (; i + W <= n; i += W) body(i, W);
  if (i < n) body(i, static_cast<int>(n - i));
}

// d: in dL/d silu(v), out dL/dy, where v = xhat*g + b, xhat = (y-mean)*rstd.
void rssm_ln_silu_bwd(float* d, const float* pre, const float* xhat, float rstd, const float* g, std::int64_t n) {
  std::int64_t i = 0;
  auto dxh_of = [&](std::int64_t i0, int cnt) {
    const bool full = cnt == W;
    V v = full ? simd::load(pre + i0) : simd::load_n(pre + i0, cnt);
    V sg = simd::sigmoid(v);
    V dsilu = simd::mul(sg, simd::fma(v, simd::sub(simd::set1(1.f), sg), simd::set1(1.f)));
    V dd = full ? simd::load(d + i0) : simd::load_n(d + i0, cnt);
    V gg = full ? simd::load(g + i0) : simd::load_n(g + i0, cnt);
    V dxh = simd::mul(simd::mul(dd, dsilu), gg);
    full ? simd::store(d + i0, dxh) : simd::store_n(d + i0, dxh, cnt);
  };
  for (; i + W <= n; i += W) dxh_of(i, W);
  if (i < n) dxh_of(i, static_cast<int>(n - i));
  const float m1 = sum_row(d, n) / static_cast<float>(n);
  const float m2 = dot_row(d, xhat, n) / static_cast<float>(n);
  const V vm1 = simd::set1(m1), vm2 = simd::set1(m2), vr = simd::set1(rstd);
  auto fin = [&](std::int64_t i0, int cnt) {
    const bool full = cnt == W;
    V dxh = full ? simd::load(d + i0) : simd::load_n(d + i0, cnt);
    V xh = full ? simd::load(xhat + i0) : simd::load_n(xhat + i0, cnt);
    V dy = simd::mul(vr, simd::sub(simd::sub(dxh, vm1), simd::mul(xh, vm2)));
    full ? simd::store(d + i0, dy) : simd::store_n(d + i0, dy, cnt);
  };
  for (i = 0; i + W <= n; i += W) fin(i, W);
  if (i < n) fin(i, static_cast<int>(n - i));
}

// g: LayerNormed gate pre-activations [3D] (r | c | u); hout may alias h.
void rssm_gru(const float* g, const float* h, float* hout, std::int64_t D) {
  const V one = simd::set1(1.f);
  auto body = [&](std::int64_t i0, int cnt) {
    const bool full = cnt == W;
    auto ld = [&](const float* p) { return full ? simd::load(p + i0) : simd::load_n(p + i0, cnt); };
    V r = simd::sigmoid(ld(g));
    V c = simd::tanh(simd::mul(r, ld(g + D)));
    V u = simd::sigmoid(simd::sub(ld(g + 2 * D), one));
    V hv = ld(h);
    V out = simd::add(simd::mul(u, c), simd::mul(simd::sub(one, u), hv));
    full ? simd::store(hout + i0, out) : simd::store_n(hout + i0, out, cnt);
  };
  std::int64_t i = 0;
  for (; i + W <= D; i += W) body(i, W);
  if (i < D) body(i, static_cast<int>(D - i));
}

// logits [S*C] -> one-hot [S*C]; probs: scratch [S*C]. Class = first k with cdf[k] > u.
// index (optional) [S]: the column s*C + k of each group's one.
void rssm_sample(const float* logits, std::int64_t S, std::int64_t C, const float* u, float* onehot, float* probs,
                 std::int32_t* index) {
  const std::int64_t Z = S * C;
  for (std::int64_t s = 0; s < S; ++s) {
    const float* l = logits + s * C;
    float mx = l[0];
    for (std::int64_t c = 1; c < C; ++c) mx = l[c] > mx ? l[c] : mx;
    for (std::int64_t c = 0; c < C; ++c) probs[s * C + c] = l[c] - mx;
  }
  simd::map_inplace(probs, Z, [](V x) { return simd::exp(x); });
  const float mix = kUnimix / static_cast<float>(C);
  for (std::int64_t s = 0; s < S; ++s) {
    float* p = probs + s * C;
    float tot = 0.f;
    for (std::int64_t c = 0; c < C; ++c) tot += p[c];
    const float scale = (1.f - kUnimix) / tot;
    float cdf = 0.f;
    std::int64_t k = C - 1;
    for (std::int64_t c = 0; c < C; ++c) {
      cdf += p[c] * scale + mix;
      if (cdf > u[s]) { k = c; break; }
    }
    for (std::int64_t c = 0; c < C; ++c) onehot[s * C + c] = 0.f;
    onehot[s * C + k] = 1.f;
    if (index) index[s] = static_cast<std::int32_t>(s * C + k);
  }
}

// out [2A] = (mean | raw) -> a [A]
void rssm_actor_head(const float* out, const float* eps, float* a, std::int64_t A) {
  for (std::int64_t i = 0; i < A; ++i) {
    const float raw = out[A + i];
    const float sp = raw > 20.f ? raw : std::log1p(std::exp(raw));  // softplus, as torch (threshold 20)
    a[i] = std::tanh(out[i] + (sp + kStdMin) * eps[i]);
  }
}

// logits [N] -> psi [N], dpsi [N] = psi*(1-psi) (d sum psi / d logits)
void rssm_sa_head(const float* logits, float* psi, float* dpsi, std::int64_t N) {
  for (std::int64_t i = 0; i < N; ++i) {
    const float p = 1.f / (1.f + std::exp(-logits[i]));
    psi[i] = p;
    if (dpsi) dpsi[i] = p * (1.f - p);
  }
}

void rssm_axpy(float* y, const float* x, float alpha, std::int64_t n) {
  const V va = simd::set1(alpha);
  std::int64_t i = 0;
  for (; i + W <= n; i += W) simd::store(y + i, simd::fma(va, simd::load(x + i), simd::load(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

METACOG_ISA_EXPORT(rssm_ln, &rssm_ln)
METACOG_ISA_EXPORT(rssm_ln_silu_bwd, &rssm_ln_silu_bwd)
METACOG_ISA_EXPORT(rssm_gru, &rssm_gru)
METACOG_ISA_EXPORT(rssm_sample, &rssm_sample)
METACOG_ISA_EXPORT(rssm_actor_head, &rssm_actor_head)
METACOG_ISA_EXPORT(rssm_sa_head, &rssm_sa_head)
METACOG_ISA_EXPORT(rssm_axpy, &rssm_axpy)

}  // namespace METACOG_ISA
}  // namespace metacog
