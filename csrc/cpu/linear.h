// Callable entry points to the per-ISA dense primitives in csrc/cpu/isa/linear.cpp,
// and the packed weight format of the small-GEMM micro-kernels.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "core/isa.h"

namespace metacog {

using DotF32 = float (*)(const float*, const float*, std::int64_t);
using LinearF32 = void (*)(const float* W, const float* bias, const float* x, float* y,
                           std::int64_t B, std::int64_t out, std::int64_t in);

// y[B,out] = x[B,in] @ W[out,in]^T + bias  (bias may be null)
inline void linear_f32(const float* W, const float* bias, const float* x, float* y, std::int64_t B,
                       std::int64_t out, std::int64_t in) {
  static thread_local IsaFn<LinearF32> fn("linear_f32");
  fn.get()(W, bias, x, y, B, out, in);
}

inline float dot_f32(const float* a, const float* b, std::int64_t n) {
  static thread_local IsaFn<DotF32> fn("dot_f32");
  return fn.get()(a, b, n);
}

// ---------------------------------------------------------------------------
// Packed matrices for y[M, N] = x[M, K] @ P[K, N] (+ bias[N]).
// Columns are cut into panels of kPanel; each panel is stored contiguously
// ([panel][K][kPanel] for fp32, [panel][ceil(K/2)][kPanel][2] bf16 pairs for
// the bf16 path), so a panel streams sequentially and stays in L1/L2 while the
// micro-kernel sweeps the rows of x. Padding columns/rows are zero.
// ---------------------------------------------------------------------------
constexpr std::int64_t kPanel = 64;

template <class T>
class AlignedBuf {
 public:
  AlignedBuf() = default;
  explicit AlignedBuf(std::size_t n) { resize(n); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
  AlignedBuf(AlignedBuf&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  AlignedBuf& operator=(AlignedBuf&& o) noexcept {
    if (this != &o) { std::free(p_); p_ = o.p_; n_ = o.n_; o.p_ = nullptr; o.n_ = 0; }
    return *this;
  }
  ~AlignedBuf() { std::free(p_); }
  // Zero-filled; reallocates only when growing.
  void resize(std::size_t n) {
    if (n > n_) {
      std::free(p_);
      std::size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
      p_ = static_cast<T*>(std::aligned_alloc(64, bytes ? bytes : 64));
      if (!p_) throw std::bad_alloc();
      n_ = n;
    }
    std::memset(static_cast<void*>(p_), 0, n * sizeof(T));
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

inline std::uint16_t f32_to_bf16(float x) {  // round to nearest even
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_to_f32(std::uint16_t h) {
  std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

struct PackedMat {
  std::int64_t K = 0, N = 0, panels = 0;
  bool bf16 = false;
  AlignedBuf<float> f;
  AlignedBuf<std::uint16_t> h;

  // get(k, n) returns the logical element P[k, n].
  template <class Get>
  void pack(std::int64_t K_, std::int64_t N_, bool use_bf16, Get get) {
    K = K_;
    N = N_;
    bf16 = use_bf16;
    panels = (N + kPanel - 1) / kPanel;
    if (!bf16) {
      f.resize(static_cast<std::size_t>(panels * K * kPanel));
      float* d = f.data();
      for (std::int64_t p = 0; p < panels; ++p)
        for (std::int64_t k = 0; k < K; ++k)
          for (std::int64_t j = 0; j < kPanel; ++j) {
            std::int64_t n = p * kPanel + j;
            d[(p * K + k) * kPanel + j] = n < N ? get(k, n) : 0.f;
          }
    } else {
      const std::int64_t K2 = (K + 1) / 2;
      h.resize(static_cast<std::size_t>(panels * K2 * kPanel * 2));
      std::uint16_t* d = h.data();
      for (std::int64_t p = 0; p < panels; ++p)
        for (std::int64_t k2 = 0; k2 < K2; ++k2)
          for (std::int64_t j = 0; j < kPanel; ++j)
            for (std::int64_t t = 0; t < 2; ++t) {
              std::int64_t n = p * kPanel + j, k = 2 * k2 + t;
              d[((p * K2 + k2) * kPanel + j) * 2 + t] = (n < N && k < K) ? f32_to_bf16(get(k, n)) : 0;
            }
    }
  }
};

using GemmF32 = void (*)(const float* P, std::int64_t K, const float* X, std::int64_t ldx, float* Y,
                         std::int64_t ldy, std::int64_t M, std::int64_t c0, std::int64_t c1,
                         const float* bias, int accumulate);
using GemmBf16 = void (*)(const std::uint16_t* P, std::int64_t K, const float* X, std::int64_t ldx,
                          float* Y, std::int64_t ldy, std::int64_t M, std::int64_t c0, std::int64_t c1,
                          const float* bias, int accumulate);

using GatherF32 = void (*)(const float* P, std::int64_t K, const std::int32_t* idx, std::int64_t nsel,
                           float* Y, std::int64_t ldy, std::int64_t M, std::int64_t c0, std::int64_t c1,
                           const float* bias, int accumulate);
using GatherBf16 = void (*)(const std::uint16_t* P, std::int64_t K, const std::int32_t* idx, std::int64_t nsel,
                            float* Y, std::int64_t ldy, std::int64_t M, std::int64_t c0, std::int64_t c1,
                            const float* bias, int accumulate);

// Y[m, c0:c1] (+)= X[m, :K] @ P[:K, c0:c1] (+ bias[c0:c1]) for m < M.
// c0 must be a multiple of kPanel; accumulate adds to Y instead of overwriting.
// Serial: callers split rows or column ranges across OpenMP threads.
inline void gemm_packed(const PackedMat& P, const float* X, std::int64_t ldx, float* Y, std::int64_t ldy,
                        std::int64_t M, std::int64_t c0, std::int64_t c1, const float* bias, bool accumulate) {
  if (c1 <= c0 || M <= 0) return;
  if (P.bf16) {
    static thread_local IsaFn<GemmBf16> fn("gemm_packed_bf16");
    fn.get()(P.h.data(), P.K, X, ldx, Y, ldy, M, c0, c1, bias, accumulate ? 1 : 0);
  } else {
    static thread_local IsaFn<GemmF32> fn("gemm_packed_f32");
    fn.get()(P.f.data(), P.K, X, ldx, Y, ldy, M, c0, c1, bias, accumulate ? 1 : 0);
  }
}

// The same product when each row of X is a sum of one-hots: X[m] = sum_j e(idx[m*nsel + j]).
// Adds the selected rows of P in index order, so the result equals gemm_packed's
// (the skipped terms are exact zeros) while reading nsel rows instead of K.
inline void gather_packed(const PackedMat& P, const std::int32_t* idx, std::int64_t nsel, float* Y, std::int64_t ldy,
                          std::int64_t M, std::int64_t c0, std::int64_t c1, const float* bias, bool accumulate) {
  if (c1 <= c0 || M <= 0) return;
  if (P.bf16) {
    static thread_local IsaFn<GatherBf16> fn("gather_packed_bf16");
    fn.get()(P.h.data(), P.K, idx, nsel, Y, ldy, M, c0, c1, bias, accumulate ? 1 : 0);
  } else {
    static thread_local IsaFn<GatherF32> fn("gather_packed_f32");
    fn.get()(P.f.data(), P.K, idx, nsel, Y, ldy, M, c0, c1, bias, accumulate ? 1 : 0);
  }
}

}  // namespace metacog
