// Exact rerank of memory candidates with the docs/design.md §1.4 score:
//   score = w_rec * decay**((now - last_access)/unit) + w_rel * (cos+1)/2 + w_imp * importance/10
// cos = queries[q] . keys[row]: both must be L2-normalised (the memory store does it).
// Candidates are rows of keys, either one list shared by every query ([C]) or one
// list per query ([Q, C]); a row of -1 is padding and never returned.
// OpenMP over queries; within a query, serial dot products (dot_f32, per ISA).
#include <omp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/arrays.h"
#include "core/isa.h"
#include "core/registry.h"
#include "cpu/linear.h"

namespace py = pybind11;

namespace metacog {
namespace {

struct ScoreParams {
  double now, w_rec, w_rel, w_imp, log_decay_per_s;
};

struct Inputs {
  const float* q;
  const float* keys;
  const double* last_access;
  const float* importance;
  const std::int64_t* cand;
  std::int64_t Q, D, N, C;
  bool shared;  // candidates [C] shared by every query
};

// Below this many multiply-adds a call stays on one thread: the OpenMP fork/join
// costs more than it saves (measured: 25 queries x 400 candidates x 384 took
// 0.7 ms serial, 3.9 ms median on 2 threads of a busy 2-core machine).
constexpr double kParallelFlops = 2e7;

inline bool go_parallel(std::int64_t Q, std::int64_t C, std::int64_t D) {
  return Q > 1 && static_cast<double>(Q) * static_cast<double>(C) * static_cast<double>(D) > kParallelFlops;
}

inline const std::int64_t* cand_row(const Inputs& in, std::int64_t q) {
  return in.shared ? in.cand : in.cand + q * in.C;
}

inline float score_one(const Inputs& in, const ScoreParams& p, const float* qv, std::int64_t row) {
  const double rec = std::exp(p.log_decay_per_s * (p.now - in.last_access[row]));
  const double cos = dot_f32(qv, in.keys + row * in.D, in.D);
  return static_cast<float>(p.w_rec * rec + p.w_rel * 0.5 * (cos + 1.0) +
                            p.w_imp * 0.1 * static_cast<double>(in.importance[row]));
}

using Item = std::pair<float, std::int64_t>;

// "a before b" when a ranks higher: larger score, then smaller row.
inline bool better(const Item& a, const Item& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Best k distinct rows of candidates [lo, hi) into heap (a min-heap, worst on top).
void topk_range(const Inputs& in, const ScoreParams& p, const float* qv, const std::int64_t* cr, std::int64_t lo,
                std::int64_t hi, std::int64_t k, std::vector<Item>& heap) {
  heap.reserve(static_cast<size_t>(k) + 1);
  constexpr std::int64_t kAhead = 8;  // rows are scattered: prefetch a few candidates ahead
  for (std::int64_t c = lo; c < hi; ++c) {
    if (c + kAhead < hi && cr[c + kAhead] >= 0) {
      const char* nxt = reinterpret_cast<const char*>(in.keys + cr[c + kAhead] * in.D);
      for (std::int64_t b = 0; b < in.D * 4; b += 64) __builtin_prefetch(nxt + b);
      __builtin_prefetch(in.last_access + cr[c + kAhead]);
      __builtin_prefetch(in.importance + cr[c + kAhead]);
    }
    const std::int64_t r = cr[c];
    if (r < 0) continue;
    Item it{score_one(in, p, qv, r), r};
    const bool full = static_cast<std::int64_t>(heap.size()) >= k;
    if (full && !better(it, heap.front())) continue;
    // A row listed twice (e.g. found by HNSW and by recency) counts once.
    bool dup = false;
    for (const Item& h : heap) dup |= (h.second == r);
    if (dup) continue;
    if (!full) {
      heap.push_back(it);
      std::push_heap(heap.begin(), heap.end(), better);
    } else {
      std::pop_heap(heap.begin(), heap.end(), better);
      heap.back() = it;
      std::push_heap(heap.begin(), heap.end(), better);
    }
  }
}

// Sort, drop repeated rows (possible across merged per-thread heaps), write k places.
void finish_heap(std::vector<Item>& items, std::int64_t k, std::int64_t* rows_out, float* scores_out) {
  std::sort(items.begin(), items.end(), better);
  std::int64_t j = 0;
  for (size_t i = 0; i < items.size() && j < k; ++i) {
    if (i > 0 && items[i].second == items[i - 1].second) continue;  // same row => same score => adjacent
    rows_out[j] = items[i].second;
    scores_out[j] = items[i].first;
    ++j;
  }
  for (; j < k; ++j) {
    rows_out[j] = -1;
    scores_out[j] = -std::numeric_limits<float>::infinity();
  }
}

Inputs gather(const py::array& queries, const py::array& keys, const py::array& last_access,
              const py::array& importance, const py::array& candidates) {
  check_array(queries, "queries", {-1, -1});
  const auto Q = queries.shape(0), D = queries.shape(1);
  check_array(keys, "keys", {-1, D});
  const auto N = keys.shape(0);
  check_array<double>(last_access, "last_access", {N});
  check_array(importance, "importance", {N});
  if (!candidates.dtype().is(py::dtype::of<std::int64_t>()))
    throw py::value_error("candidates: expected dtype int64, got " + std::string(py::str(candidates.dtype())));
  if (!(candidates.flags() & py::array::c_style))
    throw py::value_error("candidates: expected a C-contiguous array");
  Inputs in{};
  if (candidates.ndim() == 1) {
    in.shared = true;
    in.C = candidates.shape(0);
  } else if (candidates.ndim() == 2 && candidates.shape(0) == Q) {
    in.shared = false;
    in.C = candidates.shape(1);
  } else {
    throw py::value_error("candidates: expected shape [C] or [Q=" + std::to_string(Q) + ", C], got " +
                          shape_str(candidates));
  }
  in.q = cptr(queries);
  in.keys = cptr(keys);
  in.last_access = cptr<double>(last_access);
  in.importance = cptr(importance);
  in.cand = static_cast<const std::int64_t*>(candidates.data());
  in.Q = Q;
  in.D = D;
  in.N = N;
  // Bounds are checked once here, so the parallel loops below never read out of range.
  const std::int64_t total = in.shared ? in.C : Q * in.C;
  for (std::int64_t i = 0; i < total; ++i) {
    const auto r = in.cand[i];
    if (r < -1 || r >= N)
      throw py::value_error("candidates: row " + std::to_string(r) + " out of range [-1, " + std::to_string(N) + ")");
  }
  return in;
}

ScoreParams params(double now, double w_rec, double w_rel, double w_imp, double decay, double unit) {
  if (!(decay > 0.0 && decay <= 1.0)) throw py::value_error("decay: expected 0 < decay <= 1");
  if (!(unit > 0.0)) throw py::value_error("unit: expected a positive number of seconds");
  return ScoreParams{now, w_rec, w_rel, w_imp, std::log(decay) / unit};
}

py::array_t<float> memory_scores(py::array queries, py::array keys, py::array last_access, py::array importance,
                                 py::array candidates, double now, double w_rec, double w_rel, double w_imp,
                                 double decay, double unit) {
  const Inputs in = gather(queries, keys, last_access, importance, candidates);
  const ScoreParams p = params(now, w_rec, w_rel, w_imp, decay, unit);
  py::array_t<float> out({in.Q, in.C});
  float* o = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    const float ninf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(dynamic, 1) if (go_parallel(in.Q, in.C, in.D))
    for (std::int64_t q = 0; q < in.Q; ++q) {
      const std::int64_t* cr = cand_row(in, q);
      const float* qv = in.q + q * in.D;
      for (std::int64_t c = 0; c < in.C; ++c)
        o[q * in.C + c] = cr[c] < 0 ? ninf : score_one(in, p, qv, cr[c]);
    }
  }
  return out;
}

// Top-k distinct rows per query, best first (ties: smaller row first). Fewer than k
// distinct valid candidates: the tail is padded with row -1 and score -inf.
py::tuple memory_rerank(py::array queries, py::array keys, py::array last_access, py::array importance,
                        py::array candidates, std::int64_t k, double now, double w_rec, double w_rel, double w_imp,
                        double decay, double unit) {
  if (k < 1) throw py::value_error("k: expected k >= 1, got " + std::to_string(k));
  const Inputs in = gather(queries, keys, last_access, importance, candidates);
  const ScoreParams p = params(now, w_rec, w_rel, w_imp, decay, unit);
  py::array_t<std::int64_t> rows({in.Q, k});
  py::array_t<float> scores({in.Q, k});
  std::int64_t* ro = rows.mutable_data();
  float* so = scores.mutable_data();
  {
    py::gil_scoped_release nogil;
    const std::int64_t Q = in.Q, C = in.C;
    const bool par = go_parallel(Q, C, in.D);
    const int T = par ? omp_get_max_threads() : 1;
    // Few queries with many candidates: split each query's candidates over the
    // threads (one heap each, merged after); otherwise one query per thread.
    const bool split = par && Q < T;
    std::vector<std::vector<Item>> part(split ? static_cast<size_t>(T) : 0);
    for (std::int64_t q0 = 0; q0 < (split ? Q : 1); ++q0) {
      if (split) {
#pragma omp parallel num_threads(T)
        {
          const int t = omp_get_thread_num();
          const int nt = omp_get_num_threads();
          const std::int64_t lo = C * t / nt, hi = C * (t + 1) / nt;
          part[t].clear();
          topk_range(in, p, in.q + q0 * in.D, cand_row(in, q0), lo, hi, k, part[t]);
        }
        std::vector<Item> merged;
        for (const auto& h : part) merged.insert(merged.end(), h.begin(), h.end());
        finish_heap(merged, k, ro + q0 * k, so + q0 * k);
      } else {
#pragma omp parallel for schedule(dynamic, 1) if (par)
        for (std::int64_t q = 0; q < Q; ++q) {
          std::vector<Item> heap;
          topk_range(in, p, in.q + q * in.D, cand_row(in, q), 0, C, k, heap);
          finish_heap(heap, k, ro + q * k, so + q * k);
        }
      }
    }
  }
  return py::make_tuple(rows, scores);
}


// ---------------------------------------------------------------------------
// Bounded scan: the same top-k as memory_rerank over the same candidates, reading int8 codes of
// the keys first (a quarter of the bytes). A key is stored as codes c (int8) with scale s and
// residual norm e = |key - s*c|, so for a unit query cos = s*(q.c) + q.(key - s*c) lies within
// s*(q.c) +- |q|*e. Pass 1 bounds every candidate's score from the codes; the k-th best lower
// bound is a threshold no top-k score can fall below; pass 2 scores exactly (float keys, the
// very score_one of memory_rerank) only the candidates whose upper bound reaches it. Scores,
// order and ties are therefore those of memory_rerank.
using DotI8 = float (*)(const float*, const std::int8_t*, std::int64_t);

inline float dot_i8f32(const float* q, const std::int8_t* c, std::int64_t n) {
  static thread_local IsaFn<DotI8> fn("dot_i8f32");
  return fn.get()(q, c, n);
}

// Bounds may be off by float rounding of the two dot products (~1e-6 relative over 384 terms).
constexpr double kBoundSlack = 1e-5;

struct Codes {
  const std::int8_t* codes;
  const float* scale;
  const float* err;
};

// Candidates [lo, hi) of one query: lower and upper score bounds into lo_out/up_out.
void bound_range(const Inputs& in, const Codes& cd, const ScoreParams& p, const float* qv, double qnorm,
                 const std::int64_t* cr, std::int64_t lo, std::int64_t hi, float* lo_out, float* up_out) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for (std::int64_t c = lo; c < hi; ++c) {
    const std::int64_t r = cr[c];
    if (r < 0) {
      lo_out[c] = up_out[c] = ninf;
      continue;
    }
    const double a = p.w_rec * std::exp(p.log_decay_per_s * (p.now - in.last_access[r])) +
                     p.w_imp * 0.1 * static_cast<double>(in.importance[r]);
    const double approx = static_cast<double>(cd.scale[r]) * dot_i8f32(qv, cd.codes + r * in.D, in.D);
    const double e = static_cast<double>(cd.err[r]) * qnorm + kBoundSlack;
    lo_out[c] = static_cast<float>(a + p.w_rel * 0.5 * (approx - e + 1.0)) - 1e-6f;
    up_out[c] = static_cast<float>(a + p.w_rel * 0.5 * (approx + e + 1.0)) + 1e-6f;
  }
}

py::tuple memory_rerank_bounded(py::array queries, py::array keys, py::array codes, py::array scale, py::array err,
                                py::array last_access, py::array importance, py::array candidates, std::int64_t k,
                                double now, double w_rec, double w_rel, double w_imp, double decay, double unit) {
  if (k < 1) throw py::value_error("k: expected k >= 1, got " + std::to_string(k));
  const Inputs in = gather(queries, keys, last_access, importance, candidates);
  if (!in.shared) throw py::value_error("candidates: the bounded scan takes one shared list [C]");
  check_array<std::int8_t>(codes, "codes", {in.N, in.D});
  check_array(scale, "scale", {in.N});
  check_array(err, "err", {in.N});
  if (!(w_rel >= 0.0)) throw py::value_error("w_rel: expected >= 0");
  const ScoreParams p = params(now, w_rec, w_rel, w_imp, decay, unit);
  const Codes cd{cptr<std::int8_t>(codes), cptr(scale), cptr(err)};
  py::array_t<std::int64_t> rows({in.Q, k});
  py::array_t<float> scores({in.Q, k});
  std::int64_t* ro = rows.mutable_data();
  float* so = scores.mutable_data();
  std::int64_t exact_rows = 0;
  {
    py::gil_scoped_release nogil;
    const std::int64_t C = in.C;
    // Pass 1 reads D bytes per row (not 4*D): parallel when that is large.
    const bool par = static_cast<double>(in.Q) * C * in.D > 4 * kParallelFlops;
    std::vector<float> lo_b(static_cast<size_t>(C)), up_b(static_cast<size_t>(C));
    for (std::int64_t q = 0; q < in.Q; ++q) {
      const float* qv = in.q + q * in.D;
      double qn = 0.0;
      for (std::int64_t d = 0; d < in.D; ++d) qn += static_cast<double>(qv[d]) * qv[d];
      qn = std::sqrt(qn);
      float* lo_o = lo_b.data();
      float* up_o = up_b.data();
      if (par) {
#pragma omp parallel
        {
          const int t = omp_get_thread_num(), nt = omp_get_num_threads();
          bound_range(in, cd, p, qv, qn, in.cand, C * t / nt, C * (t + 1) / nt, lo_o, up_o);
        }
      } else {
        bound_range(in, cd, p, qv, qn, in.cand, 0, C, lo_o, up_o);
      }
      // tau: the k-th largest lower bound (candidates are distinct rows in a scan; with repeats
      // it is only lower, which keeps more candidates: still exact).
      float tau = -std::numeric_limits<float>::infinity();
      if (C >= k) {
        std::vector<float> tmp(lo_b);
        std::nth_element(tmp.begin(), tmp.begin() + (k - 1), tmp.end(), std::greater<float>());
        tau = tmp[static_cast<size_t>(k - 1)];
      }
      std::vector<std::int64_t> keep;
      keep.reserve(static_cast<size_t>(std::min<std::int64_t>(C, 4 * k + 1024)));
      for (std::int64_t c = 0; c < C; ++c)
        if (in.cand[c] >= 0 && up_b[static_cast<size_t>(c)] >= tau) keep.push_back(in.cand[c]);
      exact_rows += static_cast<std::int64_t>(keep.size());
      std::vector<Item> heap;
      topk_range(in, p, qv, keep.data(), 0, static_cast<std::int64_t>(keep.size()), k, heap);
      finish_heap(heap, k, ro + q * k, so + q * k);
    }
  }
  return py::make_tuple(rows, scores, exact_rows);
}

}  // namespace
}  // namespace metacog

METACOG_BIND(memory_rerank) {
  using namespace pybind11::literals;
  m.def("memory_scores", &metacog::memory_scores, "queries"_a, "keys"_a, "last_access"_a, "importance"_a,
        "candidates"_a, "now"_a, "w_rec"_a, "w_rel"_a, "w_imp"_a, "decay"_a, "unit"_a,
        "docs/design.md §1.4 memory score of every candidate row: [Q, C] float32 (-inf for padding rows -1).");
  m.def("memory_rerank", &metacog::memory_rerank, "queries"_a, "keys"_a, "last_access"_a, "importance"_a,
        "candidates"_a, "k"_a, "now"_a, "w_rec"_a, "w_rel"_a, "w_imp"_a, "decay"_a, "unit"_a,
        "Top-k candidate rows per query by the docs/design.md §1.4 score: (rows [Q, k] int64, scores [Q, k] float32).");
  m.def("memory_rerank_bounded", &metacog::memory_rerank_bounded, "queries"_a, "keys"_a, "codes"_a, "scale"_a,
        "err"_a, "last_access"_a, "importance"_a, "candidates"_a, "k"_a, "now"_a, "w_rec"_a, "w_rel"_a, "w_imp"_a,
        "decay"_a, "unit"_a,
        "memory_rerank over shared candidates [C], bounding scores from int8 codes first and scoring exactly "
        "only those that can reach the top-k: (rows [Q, k], scores [Q, k], rows scored exactly).");
}
