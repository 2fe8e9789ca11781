// Trajectory scoring kernels (docs/design.md §1.3), CPU path.
//   score_trajectories: p[B] = sigmoid(g(concat(traj[B, Dtr], task[B or 1, Dta])))
//     g = Linear -> SiLU -> ... -> Linear(->1); the concat is never materialised:
//     layer 0 multiplies the traj half and the task half of l0.w in place, and with
//     a single task row the task half (plus bias) is computed once for all rows.
//   mean_pool_l2norm: y[B, D] = normalize(sum_t m[b,t] X[b,t,:] / max(sum_t m[b,t], 1e-9))
// OpenMP over blocks of 16 rows; per-ISA loops in csrc/cpu/isa/scoring_kernels.cpp.
#include <omp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/arrays.h"
#include "core/isa.h"
#include "core/registry.h"

namespace py = pybind11;

namespace metacog {
namespace {

using GemmNT = void (*)(const float*, std::int64_t, const float*, std::int64_t, float*, std::int64_t,
                        std::int64_t, std::int64_t, std::int64_t, int);
using PoolRow = void (*)(const float*, const float*, std::int64_t, std::int64_t, float*);

inline void gemm_nt(const float* W, std::int64_t ldw, const float* X, std::int64_t ldx, float* Y,
                    std::int64_t ldy, std::int64_t rows, std::int64_t out, std::int64_t in, bool acc) {
  static thread_local IsaFn<GemmNT> fn("scoring_gemm_nt");
  fn.get()(W, ldw, X, ldx, Y, ldy, rows, out, in, acc ? 1 : 0);
}

inline void pool_row(const float* X, const float* m, std::int64_t T, std::int64_t D, float* y) {
  static thread_local IsaFn<PoolRow> fn("scoring_pool_row");
  fn.get()(X, m, T, D, y);
}

inline float sigmoidf(float x) { return 1.f / (1.f + std::exp(-x)); }

constexpr std::int64_t kRowBlock = 16;

struct Layer {
  const float* w;
  const float* b;
  std::int64_t out, in;
};

void score_impl(const float* task, bool broadcast, const float* traj, std::int64_t B, std::int64_t Dtr,
                std::int64_t Dta, const std::vector<Layer>& layers, float* p) {
  const std::int64_t Din = Dtr + Dta;
  const std::int64_t H0 = layers[0].out;
  std::int64_t max_h = 1;
  for (const auto& l : layers) max_h = std::max(max_h, l.out);
  const std::size_t L = layers.size();

  // Broadcast task row: c0 = l0.w[:, Dtr:] @ task + l0.b, shared by every row.
  std::vector<float> c0;
  if (broadcast) {
    c0.assign(static_cast<std::size_t>(H0), 0.f);
    gemm_nt(layers[0].w + Dtr, Din, task, Dta, c0.data(), H0, 1, H0, Dta, false);
    for (std::int64_t o = 0; o < H0; ++o) c0[o] += layers[0].b[o];
  }
  const std::int64_t nblk = (B + kRowBlock - 1) / kRowBlock;
#pragma omp parallel if (nblk > 1)
  {
    std::vector<float> bufa(static_cast<std::size_t>(kRowBlock * max_h));
    std::vector<float> bufb(static_cast<std::size_t>(kRowBlock * max_h));
#pragma omp for schedule(static)
    for (std::int64_t blk = 0; blk < nblk; ++blk) {
      const std::int64_t r0 = blk * kRowBlock;
      const std::int64_t n = std::min(kRowBlock, B - r0);
      float* cur = bufa.data();
      float* nxt = bufb.data();
      gemm_nt(layers[0].w, Din, traj + r0 * Dtr, Dtr, cur, H0, n, H0, Dtr, false);
      const float* add = broadcast ? c0.data() : layers[0].b;
      if (!broadcast) gemm_nt(layers[0].w + Dtr, Din, task + r0 * Dta, Dta, cur, H0, n, H0, Dta, true);
      for (std::size_t k = 0;; ++k) {
        const std::int64_t H = layers[k].out;
        const bool last = (k + 1 == L);
        if (k > 0) {
          gemm_nt(layers[k].w, layers[k].in, cur, layers[k].in, nxt, H, n, H, layers[k].in, false);
          std::swap(cur, nxt);
          add = layers[k].b;
        }
        for (std::int64_t r = 0; r < n; ++r)
          for (std::int64_t o = 0; o < H; ++o) {
            float v = cur[r * H + o] + add[o];
            cur[r * H + o] = last ? sigmoidf(v) : v * sigmoidf(v);
          }
        if (last) break;
      }
      for (std::int64_t r = 0; r < n; ++r) p[r0 + r] = cur[r];
    }
  }
}

py::array_t<float> py_score(py::array task, py::array traj, std::vector<py::array> weights,
                            std::vector<py::array> biases) {
  check_array(traj, "traj_emb", {-1, -1});
  check_array(task, "task_emb", {-1, -1});
  const auto B = traj.shape(0), Dtr = traj.shape(1), Dta = task.shape(1);
  if (task.shape(0) != 1 && task.shape(0) != B)
    throw py::value_error("task_emb: expected 1 or " + std::to_string(B) + " rows (traj_emb has " +
                          std::to_string(B) + "), got shape " + shape_str(task));
  if (weights.empty() || weights.size() != biases.size())
    throw py::value_error("head: expected as many weights as biases, at least one layer");
  std::vector<Layer> layers;
  std::int64_t in = Dtr + Dta;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    const std::string wn = "head layer " + std::to_string(k) + " weight";
    const std::string bn = "head layer " + std::to_string(k) + " bias";
    check_array(weights[k], wn.c_str(), {-1, in});
    const auto out = weights[k].shape(0);
    check_array(biases[k], bn.c_str(), {out});
    layers.push_back({cptr(weights[k]), cptr(biases[k]), out, in});
    in = out;
  }
  if (layers.back().out != 1) throw py::value_error("head: the last layer must have 1 output");
  py::array_t<float> p(B);
  {
    py::gil_scoped_release nogil;
    score_impl(cptr(task), task.shape(0) == 1, cptr(traj), B, Dtr, Dta, layers, p.mutable_data());
  }
  return p;
}

py::array_t<float> py_mean_pool(py::array tok, py::array mask) {
  check_array(tok, "token_emb", {-1, -1, -1});
  const auto B = tok.shape(0), T = tok.shape(1), D = tok.shape(2);
  check_array(mask, "mask", {B, T});
  py::array_t<float> y({B, D});
  const float* X = cptr(tok);
  const float* M = cptr(mask);
  float* Y = y.mutable_data();
  {
    py::gil_scoped_release nogil;
#pragma omp parallel for schedule(static) if (B > 1)
    for (std::int64_t b = 0; b < B; ++b) {
      float* yb = Y + b * D;
      const float* mb = M + b * T;
      pool_row(X + b * T * D, mb, T, D, yb);
      float msum = 0.f;
      for (std::int64_t t = 0; t < T; ++t) msum += mb[t];
      const float inv = 1.f / std::max(msum, 1e-9f);
      float ss = 0.f;
      for (std::int64_t d = 0; d < D; ++d) {
        yb[d] *= inv;
        ss += yb[d] * yb[d];
      }
      const float s = 1.f / std::max(std::sqrt(ss), 1e-12f);
      for (std::int64_t d = 0; d < D; ++d) yb[d] *= s;
    }
  }
  return y;
}

}  // namespace
}  // namespace metacog

METACOG_BIND(scoring) {
  m.def("score_trajectories", &metacog::py_score, py::arg("task_emb"), py::arg("traj_emb"), py::arg("weights"),
        py::arg("biases"),
        "p[B] = sigmoid(MLP_silu(concat(traj_emb[B,Dtr], task_emb[B or 1,Dta]))); weights[k] [out,in] "
        "(float32, C-contiguous), biases[k] [out]; the last layer has 1 output.");
  m.def("mean_pool_l2norm", &metacog::py_mean_pool, py::arg("token_emb"), py::arg("mask"),
        "y[B,D] = L2-normalised masked mean of token_emb[B,T,D] with mask[B,T] (float32).");
}
