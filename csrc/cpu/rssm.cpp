// RSSM + MUSE self-assessment / self-regulation on the CPU (docs/design.md §1.1, §1.2).
//
// RssmCpu is built once from a weights dict (Python caches it per dict): it packs
// every dense layer into GEMM panels (fp32, or bf16 pairs with precision="bf16"),
// keeps LayerNorm vectors, and owns workspaces that are sized on the first call
// with a given batch and then reused. Each public method releases the GIL and
// runs its whole loop (H steps of imagine / self_regulate included) in C++.
//
// Threading (OpenMP): the batch is cut into tiles of up to kTile rows, one
// thread per tile; when the batch is too small to share out (B < 8 threads),
// all threads work on all rows and split every layer's output columns instead
// (barrier after each layer), which is what helps batch 1.
#include <omp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "core/arrays.h"
#include "core/isa.h"
#include "core/registry.h"
#include "cpu/linear.h"

namespace metacog {
namespace {

namespace py = pybind11;
using i64 = std::int64_t;

constexpr i64 kTile = 32;

// --- per-ISA row ops (csrc/cpu/isa/rssm_ops.cpp) ----------------------------------------
using LnFn = void (*)(float*, i64, const float*, const float*, int, float*, float*, float*);
using LnBwdFn = void (*)(float*, const float*, const float*, float, const float*, i64);
using GruFn = void (*)(const float*, const float*, float*, i64);
using SampleFn = void (*)(const float*, i64, i64, const float*, float*, float*, std::int32_t*);
using ActorHeadFn = void (*)(const float*, const float*, float*, i64);
using SaHeadFn = void (*)(const float*, float*, float*, i64);
using AxpyFn = void (*)(float*, const float*, float, i64);

struct Ops {
  LnFn ln;
  LnBwdFn ln_silu_bwd;
  GruFn gru;
  SampleFn sample;
  ActorHeadFn actor_head;
  SaHeadFn sa_head;
  AxpyFn axpy;
  static Ops current() {  // looked up once per call, outside the parallel region
    return Ops{reinterpret_cast<LnFn>(isa_lookup("rssm_ln")),
               reinterpret_cast<LnBwdFn>(isa_lookup("rssm_ln_silu_bwd")),
               reinterpret_cast<GruFn>(isa_lookup("rssm_gru")),
               reinterpret_cast<SampleFn>(isa_lookup("rssm_sample")),
               reinterpret_cast<ActorHeadFn>(isa_lookup("rssm_actor_head")),
               reinterpret_cast<SaHeadFn>(isa_lookup("rssm_sa_head")),
               reinterpret_cast<AxpyFn>(isa_lookup("rssm_axpy"))};
  }
};

// --- layers ------------------------------------------------------------------------------
struct Dense {
  i64 in = 0, out = 0;
  std::vector<PackedMat> seg;  // one packed matrix per input segment ([z, a], [x, h], ...)
  std::vector<float> bias, g, b;
  PackedMat bwd;  // P = W [out, in]: dX[., in] = dY[., out] @ W (self-assessment layers only)
  bool has_bwd = false;
  const float* bias_ptr() const { return bias.empty() ? nullptr : bias.data(); }
};

py::array get_w(const py::dict& w, const std::string& key, std::initializer_list<py::ssize_t> shape) {
  if (!w.contains(key.c_str())) throw py::value_error("weights: missing key '" + key + "'");
  py::array a = py::reinterpret_borrow<py::array>(w[key.c_str()]);
  check_array(a, ("weights['" + key + "']").c_str(), shape);
  return a;
}

std::vector<float> vec_of(const py::array& a) {
  const float* p = cptr(a);
  return std::vector<float>(p, p + a.size());
}

Dense make_dense(const py::dict& w, const std::string& name, i64 out, const std::vector<i64>& segs, bool bias,
                 bool ln, bool bf16, bool with_bwd) {
  Dense d;
  d.out = out;
  for (i64 k : segs) d.in += k;
  py::array W = get_w(w, name + ".w", {out, d.in});
  const float* Wp = cptr(W);
  const i64 in = d.in;
  i64 k0 = 0;
  for (i64 K : segs) {
    d.seg.emplace_back();
    d.seg.back().pack(K, out, bf16, [&](i64 k, i64 n) { return Wp[n * in + k0 + k]; });
    k0 += K;
  }
  if (bias) d.bias = vec_of(get_w(w, name + ".b", {out}));
  if (ln) {
    d.g = vec_of(get_w(w, name + ".ln.g", {out}));
    d.b = vec_of(get_w(w, name + ".ln.b", {out}));
  }
  if (with_bwd) {
    d.bwd.pack(out, in, bf16, [&](i64 k, i64 n) { return Wp[k * in + n]; });
    d.has_bwd = true;
  }
  return d;
}

i64 count_layers(const py::dict& w, const std::string& prefix) {
  i64 n = 0;
  while (w.contains((prefix + "." + std::to_string(n) + ".w").c_str())) ++n;
  return n;
}

// --- cooperation of the threads on one tile ------------------------------------------------
struct Par {
  int tid = 0, nt = 1;
  bool split = false;  // true: every thread sees all rows, layers split their columns
  void sync() const {
    if (split) {
#pragma omp barrier
    }
  }
  i64 row0() const { return split ? tid : 0; }
  i64 row_step() const { return split ? nt : 1; }
  std::pair<i64, i64> cols(i64 n) const {
    if (!split) return {0, n};
    i64 chunk = ((n + nt - 1) / nt + kPanel - 1) / kPanel * kPanel;
    i64 c0 = std::min<i64>(n, tid * chunk);
    return {c0, std::min<i64>(n, c0 + chunk)};
  }
};

// Flush-to-zero + denormals-are-zero for this thread while a kernel runs: when a trained SA
// head saturates, psi*(1-psi) and the backward products can become denormal, and x86 FMAs
// on denormal operands can take a slow microcode path. Only values below 1.2e-38 change
// (flushed to 0); the bf16 dot products already behave this way.
struct FlushDenormals {
#if defined(__x86_64__) || defined(__i386__)
  unsigned int saved;
  FlushDenormals() : saved(_mm_getcsr()) { _mm_setcsr(saved | 0x8040u); }
  ~FlushDenormals() { _mm_setcsr(saved); }
#endif
};

struct In {
  const float* p;
  i64 ld;
};

struct Work {
  i64 cap = 0;
  AlignedBuf<float> s, x1, x2, G, logits, probs, head, a, psi, dpsi, grad, dx, dx2;
  // z of the current state as one-hot columns [R, S] when every row is one-hot (onehot):
  // the z segments of img_in, actor.0 and sa.0 then add S weight rows instead of a GEMM.
  AlignedBuf<std::int32_t> zidx;
  bool onehot = false;
  std::vector<AlignedBuf<float>> sa_act, sa_pre, sa_xhat, sa_rstd;
};

}  // namespace

class RssmCpu {
 public:
  RssmCpu(const py::dict& w, i64 S, i64 C, bool bf16) : S_(S), C_(C), bf16_(bf16) {
    if (S < 1 || C < 1) throw py::value_error("S, C: expected positive group and class counts");
    py::array gw = get_w(w, "gru.w", {-1, -1});
    if (gw.shape(0) % 3) throw py::value_error("weights['gru.w']: rows must be 3*D");
    D_ = gw.shape(0) / 3;
    Hd_ = get_w(w, "img_in.w", {-1, -1}).shape(0);
    Z_ = S * C;
    get_w(w, "img_logits.w", {Z_, Hd_});
    A_ = get_w(w, "img_in.w", {Hd_, -1}).shape(1) - Z_;
    if (A_ < 1) throw py::value_error("weights['img_in.w']: expected [Hd, Z+A] with Z = S*C");
    E_ = get_w(w, "obs_out.w", {Hd_, -1}).shape(1) - D_;
    if (E_ < 1) throw py::value_error("weights['obs_out.w']: expected [Hd, D+E]");
    N_ = get_w(w, "sa.out.w", {-1, Hd_}).shape(0);
    get_w(w, "actor.out.w", {2 * A_, Hd_});
    SD_ = D_ + Z_;
    La_ = count_layers(w, "actor");
    Ls_ = count_layers(w, "sa");
    if (La_ < 1 || Ls_ < 1) throw py::value_error("weights: need actor.0.w and sa.0.w");
    img_in_ = make_dense(w, "img_in", Hd_, {Z_, A_}, true, true, bf16, false);
    gru_ = make_dense(w, "gru", 3 * D_, {Hd_, D_}, false, true, bf16, false);
    img_out_ = make_dense(w, "img_out", Hd_, {D_}, true, true, bf16, false);
    img_logits_ = make_dense(w, "img_logits", Z_, {Hd_}, true, false, bf16, false);
    obs_out_ = make_dense(w, "obs_out", Hd_, {D_, E_}, true, true, bf16, false);
    obs_logits_ = make_dense(w, "obs_logits", Z_, {Hd_}, true, false, bf16, false);
    for (i64 i = 0; i < La_; ++i)
      actor_.push_back(make_dense(w, "actor." + std::to_string(i), Hd_, i ? std::vector<i64>{Hd_} : std::vector<i64>{D_, Z_},
                                  true, true, bf16, false));
    actor_out_ = make_dense(w, "actor.out", 2 * A_, {Hd_}, true, false, bf16, false);
    for (i64 i = 0; i < Ls_; ++i)
      sa_.push_back(make_dense(w, "sa." + std::to_string(i), Hd_, i ? std::vector<i64>{Hd_} : std::vector<i64>{D_, Z_},
                               true, true, bf16, true));
    sa_out_ = make_dense(w, "sa.out", N_, {Hd_}, true, false, bf16, true);
  }

  py::dict sizes() const {
    py::dict d;
    d["D"] = D_; d["Hd"] = Hd_; d["S"] = S_; d["C"] = C_; d["Z"] = Z_; d["A"] = A_; d["E"] = E_;
    d["N"] = N_; d["L_actor"] = La_; d["L_sa"] = Ls_; d["bf16"] = bf16_;
    return d;
  }

  // ---- public kernels (validated numpy in, numpy out) ----
  py::tuple img_step(py::array h, py::array z, py::array a, py::array u) {
    check_array(h, "h", {-1, D_});
    const i64 B = h.shape(0);
    check_array(z, "z", {B, Z_});
    check_array(a, "a", {B, A_});
    check_array(u, "u", {B, S_});
    py::array_t<float> ho({B, D_}), zo({B, Z_}), lo({B, Z_});
    const float *hp = cptr(h), *zp = cptr(z), *ap = cptr(a), *up = cptr(u);
    float *hop = ho.mutable_data(), *zop = zo.mutable_data(), *lop = lo.mutable_data();
    run(B, [&](const Ops& ops, const Par& par, Work& wk, i64 r0, i64 R) {
      detect_onehot(par, wk, R, zp + r0 * Z_, Z_);
      seq(ops, par, wk, R, {hp + r0 * D_, D_}, {zp + r0 * Z_, Z_}, {ap + r0 * A_, A_}, hop + r0 * D_, D_);
      prior(ops, par, wk, R, {hop + r0 * D_, D_}, lop + r0 * Z_, Z_);
      sample(ops, par, wk, R, lop + r0 * Z_, Z_, up + r0 * S_, zop + r0 * Z_, Z_);
    });
    return py::make_tuple(ho, zo, lo);
  }

  py::tuple obs_step(py::array h, py::array z, py::array a, py::array e, py::array u) {
    check_array(h, "h", {-1, D_});
    const i64 B = h.shape(0);
    check_array(z, "z", {B, Z_});
    check_array(a, "a", {B, A_});
    check_array(e, "embed", {B, E_});
    check_array(u, "u", {B, S_});
    py::array_t<float> ho({B, D_}), zo({B, Z_}), lo({B, Z_});
    const float *hp = cptr(h), *zp = cptr(z), *ap = cptr(a), *ep = cptr(e), *up = cptr(u);
    float *hop = ho.mutable_data(), *zop = zo.mutable_data(), *lop = lo.mutable_data();
    run(B, [&](const Ops& ops, const Par& par, Work& wk, i64 r0, i64 R) {
      detect_onehot(par, wk, R, zp + r0 * Z_, Z_);
      seq(ops, par, wk, R, {hp + r0 * D_, D_}, {zp + r0 * Z_, Z_}, {ap + r0 * A_, A_}, hop + r0 * D_, D_);
      dense_block(ops, par, obs_out_, {{hop + r0 * D_, D_}, {ep + r0 * E_, E_}}, R, wk.x1.data());
      dense(par, obs_logits_, {{wk.x1.data(), Hd_}}, R, lop + r0 * Z_, Z_);
      sample(ops, par, wk, R, lop + r0 * Z_, Z_, up + r0 * S_, zop + r0 * Z_, Z_);
    });
    return py::make_tuple(ho, zo, lo);
  }

  py::tuple imagine(py::array h0, py::array z0, py::array eps, py::array u) {
    check_array(h0, "h0", {-1, D_});
    const i64 B = h0.shape(0);
    check_array(z0, "z0", {B, Z_});
    check_array(eps, "eps", {-1, B, A_});
    const i64 H = eps.shape(0);
    check_array(u, "u", {H, B, S_});
    py::array_t<float> hs({H, B, D_}), zs({H, B, Z_}), acts({H, B, A_});
    const float *hp = cptr(h0), *zp = cptr(z0), *ep = cptr(eps), *up = cptr(u);
    float *hsp = hs.mutable_data(), *zsp = zs.mutable_data(), *asp = acts.mutable_data();
    run(B, [&](const Ops& ops, const Par& par, Work& wk, i64 r0, i64 R) {
      float* s = wk.s.data();
      load_state(par, R, hp + r0 * D_, zp + r0 * Z_, s);
      detect_onehot(par, wk, R, s + D_, SD_);
      for (i64 t = 0; t < H; ++t) {
        float* at = asp + (t * B + r0) * A_;
        actor(ops, par, wk, R, {s, SD_}, ep + (t * B + r0) * A_, at, A_);
        seq(ops, par, wk, R, {s, SD_}, {s + D_, SD_}, {at, A_}, s, SD_);
        prior(ops, par, wk, R, {s, SD_}, wk.logits.data(), Z_);
        sample(ops, par, wk, R, wk.logits.data(), Z_, up + (t * B + r0) * S_, s + D_, SD_);
        for (i64 r = par.row0(); r < R; r += par.row_step()) {
          std::memcpy(hsp + (t * B + r0 + r) * D_, s + r * SD_, sizeof(float) * D_);
          std::memcpy(zsp + (t * B + r0 + r) * Z_, s + r * SD_ + D_, sizeof(float) * Z_);
        }
        par.sync();
      }
    });
    return py::make_tuple(hs, zs, acts);
  }

  py::tuple self_assess(py::array s, bool grad) {
    check_array(s, "s", {-1, SD_});
    const i64 B = s.shape(0);
    py::array_t<float> psi({B, N_});
    py::array_t<float> g = grad ? py::array_t<float>({B, SD_}) : py::array_t<float>(std::vector<py::ssize_t>{0, SD_});
    const float* sp = cptr(s);
    float *pp = psi.mutable_data(), *gp = grad ? g.mutable_data() : nullptr;
    run(B, [&](const Ops& ops, const Par& par, Work& wk, i64 r0, i64 R) {
      detect_onehot(par, wk, R, sp + r0 * SD_ + D_, SD_);
      sa(ops, par, wk, R, {sp + r0 * SD_, SD_}, pp + r0 * N_, gp ? gp + r0 * SD_ : nullptr);
    });
    if (grad) return py::make_tuple(psi, g);
    return py::make_tuple(psi);
  }

  py::tuple self_regulate(py::array h, py::object z_obj, i64 H, float beta, py::array eps, py::object u_obj,
                          bool trace) {
    check_array(h, "h_t", {-1, D_});
    const i64 B = h.shape(0);
    if (H < 0) throw py::value_error("H: expected an int >= 0");
    check_array(eps, "eps", {H + 1, B, A_});
    py::array z, u;
    if (!z_obj.is_none()) {
      z = z_obj.cast<py::array>();
      check_array(z, "z_t", {B, Z_});
    } else {
      if (u_obj.is_none()) throw py::value_error("u: needed to sample z_t from the prior when z_t is None");
      u = u_obj.cast<py::array>();
      check_array(u, "u", {B, S_});
    }
    py::array_t<float> zt({B, Z_}), at({B, A_}), hn({B, D_});
    py::array_t<float> tr(std::vector<py::ssize_t>{trace ? H : 0, B, N_});
    const float *hp = cptr(h), *zp = z_obj.is_none() ? nullptr : cptr(z), *up = u_obj.is_none() ? nullptr : cptr(u);
    const float* ep = cptr(eps);
    float *ztp = zt.mutable_data(), *atp = at.mutable_data(), *hnp = hn.mutable_data();
    float* trp = trace ? tr.mutable_data() : nullptr;
    run(B, [&](const Ops& ops, const Par& par, Work& wk, i64 r0, i64 R) {
      float* s = wk.s.data();
      if (zp) {
        load_state(par, R, hp + r0 * D_, zp + r0 * Z_, s);
        detect_onehot(par, wk, R, s + D_, SD_);
      } else {
        load_state(par, R, hp + r0 * D_, nullptr, s);
        prior(ops, par, wk, R, {s, SD_}, wk.logits.data(), Z_);
        sample(ops, par, wk, R, wk.logits.data(), Z_, up + r0 * S_, s + D_, SD_);
      }
      for (i64 r = par.row0(); r < R; r += par.row_step())
        std::memcpy(ztp + (r0 + r) * Z_, s + r * SD_ + D_, sizeof(float) * Z_);
      for (i64 k = 0; k < H; ++k) {
        actor(ops, par, wk, R, {s, SD_}, ep + (k * B + r0) * A_, wk.a.data(), A_);      // line 9
        seq(ops, par, wk, R, {s, SD_}, {s + D_, SD_}, {wk.a.data(), A_}, s, SD_);      // line 10
        sa(ops, par, wk, R, {s, SD_}, wk.psi.data(), wk.grad.data());                  // line 11
        if (par.tid == 0) wk.onehot = wk.onehot && beta == 0.f;  // the gradient step makes z continuous
        for (i64 r = par.row0(); r < R; r += par.row_step()) {
          ops.axpy(s + r * SD_, wk.grad.data() + r * SD_, beta, SD_);
          if (trp) std::memcpy(trp + (k * B + r0 + r) * N_, wk.psi.data() + r * N_, sizeof(float) * N_);
        }
        par.sync();
      }
      float* a_out = atp + r0 * A_;
      actor(ops, par, wk, R, {s, SD_}, ep + (H * B + r0) * A_, a_out, A_);                  // line 13
      seq(ops, par, wk, R, {s, SD_}, {s + D_, SD_}, {a_out, A_}, hnp + r0 * D_, D_);        // line 14
    });
    if (trace) return py::make_tuple(zt, at, hn, tr);
    return py::make_tuple(zt, at, hn, py::none());
  }

 private:
  // ---- scheduling ----
  template <class F>
  void run(i64 B, F&& f) {
    if (B < 1) throw py::value_error("batch: expected at least one row");
    const Ops ops = Ops::current();
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu_);  // workspaces belong to one call at a time
    const int nt = omp_get_max_threads();
    if (nt > 1 && B < 8 * nt) {
      ensure(1, B);
      Work& wk = work_[0];
#pragma omp parallel num_threads(nt)
      {
        FlushDenormals ftz;
        Par par{omp_get_thread_num(), omp_get_num_threads(), true};
        f(ops, par, wk, 0, B);
      }
      return;
    }
    const i64 TB = std::min<i64>(kTile, (B + nt - 1) / nt);
    const i64 ntiles = (B + TB - 1) / TB;
    const int nthr = static_cast<int>(std::min<i64>(nt, ntiles));
    ensure(nthr, TB);
#pragma omp parallel num_threads(nthr)
    {
      FlushDenormals ftz;
      const int tid = omp_get_thread_num();
      Par par{tid, nthr, false};
      for (i64 t = tid; t < ntiles; t += nthr) f(ops, par, work_[tid], t * TB, std::min(TB, B - t * TB));
    }
  }

  void ensure(int nws, i64 R) {
    if (static_cast<int>(work_.size()) < nws) work_.resize(nws);
    const i64 head = std::max<i64>(2 * A_, N_);
    const i64 wide = std::max(Hd_, SD_);
    for (int i = 0; i < nws; ++i) {
      Work& w = work_[i];
      if (w.cap >= R) continue;
      auto sz = [R](i64 n) { return static_cast<std::size_t>(R * n); };
      w.s.resize(sz(SD_)); w.x1.resize(sz(Hd_)); w.x2.resize(sz(Hd_)); w.G.resize(sz(3 * D_));
      w.logits.resize(sz(Z_)); w.probs.resize(sz(Z_)); w.head.resize(sz(head)); w.a.resize(sz(A_));
      w.zidx.resize(sz(S_));
      w.psi.resize(sz(N_)); w.dpsi.resize(sz(N_)); w.grad.resize(sz(SD_)); w.dx.resize(sz(wide)); w.dx2.resize(sz(wide));
      w.sa_act.resize(Ls_); w.sa_pre.resize(Ls_); w.sa_xhat.resize(Ls_); w.sa_rstd.resize(Ls_);
      for (i64 l = 0; l < Ls_; ++l) {
        w.sa_act[l].resize(sz(Hd_)); w.sa_pre[l].resize(sz(Hd_)); w.sa_xhat[l].resize(sz(Hd_)); w.sa_rstd[l].resize(sz(1));
      }
      w.cap = R;
    }
  }

  // ---- building blocks ----
  // Y[R, out] = sum_seg X_seg @ W_seg^T + bias (this thread's columns), then sync.
  // With zidx, segment zseg is a one-hot z: its rows are gathered instead of multiplied.
  void dense(const Par& par, const Dense& L, std::initializer_list<In> xs, i64 R, float* Y, i64 ldy,
             const std::int32_t* zidx = nullptr, std::size_t zseg = 0) const {
    auto [c0, c1] = par.cols(L.out);
    std::size_t i = 0;
    for (const In& x : xs) {
      const float* bias = i == 0 ? L.bias_ptr() : nullptr;
      if (zidx && i == zseg)
        gather_packed(L.seg[i], zidx, S_, Y, ldy, R, c0, c1, bias, i > 0);
      else
        gemm_packed(L.seg[i], x.p, x.ld, Y, ldy, R, c0, c1, bias, i > 0);
      ++i;
    }
    par.sync();
  }

  // Marks wk.onehot and fills wk.zidx when every row of z [R, Z] is one-hot per group.
  void detect_onehot(const Par& par, Work& wk, i64 R, const float* z, i64 ldz) const {
    if (par.tid == 0) {
      bool ok = true;
      for (i64 r = 0; r < R && ok; ++r)
        for (i64 s = 0; s < S_ && ok; ++s) {
          const float* g = z + r * ldz + s * C_;
          i64 hot = -1;
          for (i64 c = 0; c < C_ && ok; ++c) {
            if (g[c] == 1.f && hot < 0) hot = c;
            else if (g[c] != 0.f) ok = false;
          }
          ok = ok && hot >= 0;
          if (ok) wk.zidx.data()[r * S_ + s] = static_cast<std::int32_t>(s * C_ + hot);
        }
      wk.onehot = ok;
    }
    par.sync();
  }

  const std::int32_t* zidx_of(const Work& wk) const { return wk.onehot ? wk.zidx.data() : nullptr; }

  // Y[R, Hd] = silu(ln(dense(xs)))
  void dense_block(const Ops& ops, const Par& par, const Dense& L, std::initializer_list<In> xs, i64 R, float* Y,
                   const std::int32_t* zidx = nullptr, std::size_t zseg = 0) const {
    dense(par, L, xs, R, Y, L.out, zidx, zseg);
    for (i64 r = par.row0(); r < R; r += par.row_step())
      ops.ln(Y + r * L.out, L.out, L.g.data(), L.b.data(), 1, nullptr, nullptr, nullptr);
    par.sync();
  }

  void load_state(const Par& par, i64 R, const float* h, const float* z, float* s) const {
    for (i64 r = par.row0(); r < R; r += par.row_step()) {
      std::memcpy(s + r * SD_, h + r * D_, sizeof(float) * D_);
      if (z) std::memcpy(s + r * SD_ + D_, z + r * Z_, sizeof(float) * Z_);
    }
    par.sync();
  }

  // Sequence model h' = f(h, z, a): img_in block + LayerNorm GRU. hout may alias h.
  void seq(const Ops& ops, const Par& par, Work& wk, i64 R, In h, In z, In a, float* hout, i64 ldo) const {
    dense_block(ops, par, img_in_, {z, a}, R, wk.x1.data(), zidx_of(wk), 0);
    float* G = wk.G.data();
    dense(par, gru_, {{wk.x1.data(), Hd_}, h}, R, G, 3 * D_);
    for (i64 r = par.row0(); r < R; r += par.row_step()) {
      ops.ln(G + r * 3 * D_, 3 * D_, gru_.g.data(), gru_.b.data(), 0, nullptr, nullptr, nullptr);
      ops.gru(G + r * 3 * D_, h.p + r * h.ld, hout + r * ldo, D_);
    }
    par.sync();
  }

  void prior(const Ops& ops, const Par& par, Work& wk, i64 R, In h, float* logits, i64 ldl) const {
    dense_block(ops, par, img_out_, {h}, R, wk.x1.data());
    dense(par, img_logits_, {{wk.x1.data(), Hd_}}, R, logits, ldl);
  }

  void sample(const Ops& ops, const Par& par, Work& wk, i64 R, const float* logits, i64 ldl, const float* u, float* z,
              i64 ldz) const {
    for (i64 r = par.row0(); r < R; r += par.row_step())
      ops.sample(logits + r * ldl, S_, C_, u + r * S_, z + r * ldz, wk.probs.data() + r * Z_, wk.zidx.data() + r * S_);
    if (par.tid == 0) wk.onehot = true;
    par.sync();
  }

  void actor(const Ops& ops, const Par& par, Work& wk, i64 R, In s, const float* eps, float* a, i64 lda) const {
    float* bufs[2] = {wk.x1.data(), wk.x2.data()};
    dense_block(ops, par, actor_[0], {s, {s.p + D_, s.ld}}, R, bufs[0], zidx_of(wk), 1);
    In x = {bufs[0], Hd_};
    for (i64 l = 1; l < La_; ++l) {
      float* y = bufs[l % 2];
      dense_block(ops, par, actor_[l], {x}, R, y);
      x = {y, Hd_};
    }
    float* head = wk.head.data();
    dense(par, actor_out_, {x}, R, head, 2 * A_);
    for (i64 r = par.row0(); r < R; r += par.row_step()) ops.actor_head(head + r * 2 * A_, eps + r * A_, a + r * lda, A_);
    par.sync();
  }

  // psi [R, N]; grad (optional) [R, SD] = d(sum psi)/ds, by hand: sigmoid, then per layer
  // (from the top) W^T, SiLU' and LayerNorm backward.
  void sa(const Ops& ops, const Par& par, Work& wk, i64 R, In s, float* psi, float* grad) const {
    const bool g = grad != nullptr;
    In x = s;
    for (i64 l = 0; l < Ls_; ++l) {
      float* y = wk.sa_act[l].data();
      if (l == 0)
        dense(par, sa_[0], {s, {s.p + D_, s.ld}}, R, y, Hd_, zidx_of(wk), 1);
      else
        dense(par, sa_[l], {x}, R, y, Hd_);
      for (i64 r = par.row0(); r < R; r += par.row_step())
        ops.ln(y + r * Hd_, Hd_, sa_[l].g.data(), sa_[l].b.data(), 1, g ? wk.sa_xhat[l].data() + r * Hd_ : nullptr,
               g ? wk.sa_pre[l].data() + r * Hd_ : nullptr, wk.sa_rstd[l].data() + r);
      par.sync();
      x = {y, Hd_};
    }
    float* head = wk.head.data();
    dense(par, sa_out_, {x}, R, head, N_);
    for (i64 r = par.row0(); r < R; r += par.row_step())
      ops.sa_head(head + r * N_, psi + r * N_, g ? wk.dpsi.data() + r * N_ : nullptr, N_);
    par.sync();
    if (!g) return;
    float* d = wk.dx.data();
    float* d2 = wk.dx2.data();
    {
      auto [c0, c1] = par.cols(Hd_);
      gemm_packed(sa_out_.bwd, wk.dpsi.data(), N_, d, Hd_, R, c0, c1, nullptr, false);
      par.sync();
    }
    for (i64 l = Ls_ - 1; l >= 0; --l) {
      for (i64 r = par.row0(); r < R; r += par.row_step())
        ops.ln_silu_bwd(d + r * Hd_, wk.sa_pre[l].data() + r * Hd_, wk.sa_xhat[l].data() + r * Hd_, wk.sa_rstd[l].data()[r],
                        sa_[l].g.data(), Hd_);
      par.sync();
      const i64 n_in = sa_[l].in;
      float* out = l == 0 ? grad : d2;
      auto [c0, c1] = par.cols(n_in);
      gemm_packed(sa_[l].bwd, d, Hd_, out, n_in, R, c0, c1, nullptr, false);
      par.sync();
      std::swap(d, d2);
    }
  }

  i64 D_ = 0, Hd_ = 0, S_ = 0, C_ = 0, Z_ = 0, A_ = 0, E_ = 0, N_ = 0, SD_ = 0, La_ = 0, Ls_ = 0;
  bool bf16_ = false;
  Dense img_in_, gru_, img_out_, img_logits_, obs_out_, obs_logits_, actor_out_, sa_out_;
  std::vector<Dense> actor_, sa_;
  std::vector<Work> work_;
  std::mutex mu_;
};

}  // namespace metacog

namespace py = pybind11;

METACOG_BIND(rssm) {
  using metacog::RssmCpu;
  py::class_<RssmCpu>(m, "RssmCpu",
                      "RSSM + self-assessment kernels on packed weights (private: use metacog_fast.kernels).")
      .def(py::init<const py::dict&, std::int64_t, std::int64_t, bool>(), py::arg("weights"), py::arg("S"),
           py::arg("C"), py::arg("bf16") = false)
      .def("sizes", &RssmCpu::sizes)
      .def("img_step", &RssmCpu::img_step, py::arg("h"), py::arg("z"), py::arg("a"), py::arg("u"))
      .def("obs_step", &RssmCpu::obs_step, py::arg("h"), py::arg("z"), py::arg("a"), py::arg("embed"), py::arg("u"))
      .def("imagine", &RssmCpu::imagine, py::arg("h0"), py::arg("z0"), py::arg("eps"), py::arg("u"))
      .def("self_assess", &RssmCpu::self_assess, py::arg("s"), py::arg("grad") = false)
      .def("self_regulate", &RssmCpu::self_regulate, py::arg("h"), py::arg("z"), py::arg("H"), py::arg("beta"),
           py::arg("eps"), py::arg("u"), py::arg("trace") = false);
}
