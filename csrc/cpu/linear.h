// Callable entry points to the per-ISA dense primitives in csrc/cpu/isa/linear.cpp.
#pragma once
#include <cstdint>

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

}  // namespace metacog
