// Host emulation of the small part of CUDA that csrc/cuda/rssm.cu uses, so that the kernels
// can be RUN and checked against the torch reference on a machine without a GPU
// (tests/test_rssm_cuda.py builds rssm.cu with g++ and -DMETACOG_CUDA_HOST_EMULATION).
//
// Every CUDA thread of a launch is a fiber (ucontext) on one OS thread; barriers
// (__syncwarp, warp shuffles, __syncthreads, grid.sync) switch fibers, so the emulation is
// deterministic and catches barrier mismatches (a deadlock is reported as an error) and
// most indexing mistakes. It says nothing about speed, memory coalescing or real
// concurrency hazards of the hardware (weak memory ordering, L1 coherence).
#pragma once
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__

struct float4 {
  float x, y, z, w;
};
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint3 {
  unsigned x, y, z;
};
using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorLaunchFailure = 719;
using cudaStream_t = void*;
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount, cudaDevAttrCooperativeLaunch };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };

using std::max;
using std::min;

// Defined by the including translation unit: calls kernel `k` with the argument array `args`.
void metacog_emu_invoke(const void* k, void** args);

namespace emu {

struct Barrier {
  int size = 0;
  int count = 0;
  unsigned long gen = 0;
};

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  unsigned tid = 0, bid = 0;
  bool done = false;
  const Barrier* wait = nullptr;
  unsigned long wait_gen = 0;
};

struct Launch {
  std::vector<Fiber> fibers;
  std::vector<Barrier> warps, blocks;
  std::vector<std::vector<std::uint32_t>> slots;  // per warp, 32 shuffle slots
  std::vector<std::vector<float4>> smem;          // per block dynamic shared memory
  Barrier grid;
  ucontext_t sched;
  std::size_t cur = 0;
  dim3 gdim, bdim;
  const void* kernel = nullptr;
  void** args = nullptr;
  std::string error;
};

inline Launch*& current() {
  static Launch* L = nullptr;
  return L;
}
inline Fiber& me() { return current()->fibers[current()->cur]; }
inline unsigned warp_of_me() { return me().bid * ((current()->bdim.x + 31) / 32) + me().tid / 32; }

inline void yield() { swapcontext(&me().ctx, &current()->sched); }

inline void arrive(Barrier& b) {
  if (++b.count == b.size) {
    b.count = 0;
    ++b.gen;
    return;
  }
  me().wait = &b;
  me().wait_gen = b.gen;
  yield();
}

inline void trampoline() {
  Launch* L = current();
  metacog_emu_invoke(L->kernel, L->args);
  me().done = true;
  swapcontext(&me().ctx, &L->sched);
}

inline bool runnable(const Fiber& f) { return !f.done && (f.wait == nullptr || f.wait->gen != f.wait_gen); }

// Runs every thread of the launch to completion. Throws on a barrier deadlock.
inline void run(const void* k, void** args, dim3 grid, dim3 block, std::size_t smem_bytes) {
  if (block.x % 32 != 0 || block.y != 1 || block.z != 1 || grid.y != 1 || grid.z != 1)
    throw std::runtime_error("emulation supports 1-D launches with whole warps only");
  Launch L;
  L.gdim = grid;
  L.bdim = block;
  L.kernel = k;
  L.args = args;
  const unsigned nthreads = grid.x * block.x, wpb = block.x / 32;
  L.fibers.resize(nthreads);
  L.warps.resize(grid.x * wpb);
  L.slots.assign(grid.x * wpb, std::vector<std::uint32_t>(32));
  for (auto& w : L.warps) w.size = 32;
  L.blocks.resize(grid.x);
  for (auto& b : L.blocks) b.size = static_cast<int>(block.x);
  L.grid.size = static_cast<int>(nthreads);
  L.smem.assign(grid.x, std::vector<float4>((smem_bytes + sizeof(float4) - 1) / sizeof(float4) + 1));
  Launch* saved = current();
  current() = &L;
  for (unsigned i = 0; i < nthreads; ++i) {
    Fiber& f = L.fibers[i];
    f.tid = i % block.x;
    f.bid = i / block.x;
    f.stack.resize(256 * 1024);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, trampoline, 0);
  }
  std::size_t alive = nthreads, cur = 0;
  while (alive > 0) {
    // prefer the same warp, then the same block, then anyone: a barrier releases quickly
    std::size_t pick = nthreads;
    const std::size_t w0 = cur / 32 * 32, b0 = cur / block.x * block.x;
    for (std::size_t j = 1; j <= 32 && pick == nthreads; ++j) {
      const std::size_t i = w0 + (cur - w0 + j) % 32;
      if (runnable(L.fibers[i])) pick = i;
    }
    for (std::size_t j = 1; j <= block.x && pick == nthreads; ++j) {
      const std::size_t i = b0 + (cur - b0 + j) % block.x;
      if (runnable(L.fibers[i])) pick = i;
    }
    for (std::size_t j = 1; j <= nthreads && pick == nthreads; ++j) {
      const std::size_t i = (cur + j) % nthreads;
      if (runnable(L.fibers[i])) pick = i;
    }
    if (pick == nthreads) {
      current() = saved;
      throw std::runtime_error("emulated launch deadlocked: threads wait on barriers that never complete");
    }
    cur = pick;
    L.cur = pick;
    L.fibers[pick].wait = nullptr;
    swapcontext(&L.sched, &L.fibers[pick].ctx);
    if (L.fibers[pick].done) --alive;
  }
  current() = saved;
}

template <class T>
inline T exchange(T v, int src) {
  static_assert(sizeof(T) == 4, "32-bit shuffles only");
  auto& slots = current()->slots[warp_of_me()];
  auto& bar = current()->warps[warp_of_me()];
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  slots[me().tid % 32] = bits;
  arrive(bar);
  std::uint32_t got = slots[src & 31];
  arrive(bar);
  T r;
  std::memcpy(&r, &got, 4);
  return r;
}

struct Grid {
  void sync() { arrive(current()->grid); }
};

}  // namespace emu

#define threadIdx (uint3{emu::me().tid, 0u, 0u})
#define blockIdx (uint3{emu::me().bid, 0u, 0u})
#define blockDim (emu::current()->bdim)
#define gridDim (emu::current()->gdim)
#define METACOG_DYNAMIC_SMEM(name) float4* name = emu::current()->smem[emu::me().bid].data()

inline void __syncthreads() { emu::arrive(emu::current()->blocks[emu::me().bid]); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::arrive(emu::current()->warps[emu::warp_of_me()]); }
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
  return emu::exchange(v, static_cast<int>(emu::me().tid % 32) ^ mask);
}
template <class T>
inline T __shfl_sync(unsigned, T v, int src) {
  return emu::exchange(v, src);
}
inline float __ldg(const float* p) { return *p; }
inline float4 __ldg(const float4* p) { return *p; }

namespace cooperative_groups {
inline emu::Grid this_grid() { return {}; }
}  // namespace cooperative_groups

// --- runtime API ------------------------------------------------------------------------
inline int& metacog_emu_sms() {
  static int n = 3;  // "SMs" of the emulated device: blocks of a persistent launch
  return n;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrMultiProcessorCount ? metacog_emu_sms() : 1;
  return cudaSuccess;
}
inline cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) { return cudaSuccess; }
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void*, int, std::size_t) {
  *n = 1;
  return cudaSuccess;
}
inline std::string& metacog_emu_error() {
  static std::string e;
  return e;
}
inline cudaError_t metacog_emu_launch(const void* k, dim3 g, dim3 b, void** args, std::size_t smem) {
  try {
    emu::run(k, args, g, b, smem);
  } catch (const std::exception& e) {
    metacog_emu_error() = e.what();
    return cudaErrorLaunchFailure;
  }
  return cudaSuccess;
}
inline cudaError_t cudaLaunchCooperativeKernel(const void* k, dim3 g, dim3 b, void** args, std::size_t smem,
                                               cudaStream_t) {
  return metacog_emu_launch(k, g, b, args, smem);
}
inline cudaError_t cudaLaunchKernel(const void* k, dim3 g, dim3 b, void** args, std::size_t smem, cudaStream_t) {
  return metacog_emu_launch(k, g, b, args, smem);
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return metacog_emu_error().c_str(); }
