// C ABI of the host-emulated CUDA RSSM kernels (included at the end of rssm.cu when
// METACOG_CUDA_HOST_EMULATION is defined; loaded with ctypes by tests/test_rssm_cuda.py).
// Pointers are host addresses standing in for device pointers; every function returns 0 or
// -1 with the message in err.
#pragma once
#include <cstring>
#include <exception>
#include <vector>

void metacog_emu_invoke(const void* k, void** args) {
  using metacog::cuda_rssm::Params;
  reinterpret_cast<void (*)(Params)>(const_cast<void*>(k))(*static_cast<Params*>(args[0]));
}

namespace {

metacog::cuda_rssm::Dims emu_dims(const int* d) { return {d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8]}; }

std::vector<std::uintptr_t> emu_ptrs(const std::uintptr_t* w, int n) { return std::vector<std::uintptr_t>(w, w + n); }

template <class F>
int emu_guard(F f, char* err, int errlen) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    if (err && errlen > 0) {
      std::strncpy(err, e.what(), errlen - 1);
      err[errlen - 1] = 0;
    }
    return -1;
  }
}

}  // namespace

extern "C" {

void metacog_emu_set_sms(int n) { metacog_emu_sms() = n; }

std::size_t metacog_emu_workspace_floats(const int* dims, int B) {
  return metacog::cuda_rssm::workspace_floats(emu_dims(dims), B);
}

int metacog_emu_img_step(const int* dims, const std::uintptr_t* w, int nw, int B, std::uintptr_t h, std::uintptr_t z,
                         std::uintptr_t a, std::uintptr_t u, std::uintptr_t embed, int obs, std::uintptr_t h_out,
                         std::uintptr_t z_out, std::uintptr_t lo_out, std::uintptr_t ws, char* err, int errlen) {
  return emu_guard([&] {
    metacog::cuda_rssm::img_step(emu_dims(dims), emu_ptrs(w, nw), B, h, z, a, u, embed, obs != 0, h_out, z_out,
                                 lo_out, ws, 0);
  }, err, errlen);
}

int metacog_emu_imagine(const int* dims, const std::uintptr_t* w, int nw, int B, int H, std::uintptr_t h0,
                        std::uintptr_t z0, std::uintptr_t eps, std::uintptr_t u, std::uintptr_t hs, std::uintptr_t zs,
                        std::uintptr_t acts, std::uintptr_t ws, char* err, int errlen) {
  return emu_guard([&] {
    metacog::cuda_rssm::imagine(emu_dims(dims), emu_ptrs(w, nw), B, H, h0, z0, eps, u, hs, zs, acts, ws, 0);
  }, err, errlen);
}

int metacog_emu_self_assess(const int* dims, const std::uintptr_t* w, int nw, int B, std::uintptr_t s,
                            std::uintptr_t psi, std::uintptr_t grad, std::uintptr_t ws, char* err, int errlen) {
  return emu_guard([&] { metacog::cuda_rssm::self_assess(emu_dims(dims), emu_ptrs(w, nw), B, s, psi, grad, ws, 0); },
                   err, errlen);
}

int metacog_emu_self_regulate(const int* dims, const std::uintptr_t* w, int nw, int B, int H, float beta,
                              std::uintptr_t h, std::uintptr_t z, std::uintptr_t eps, std::uintptr_t a_out,
                              std::uintptr_t h_out, std::uintptr_t trace, std::uintptr_t ws, char* err, int errlen) {
  return emu_guard([&] {
    metacog::cuda_rssm::self_regulate(emu_dims(dims), emu_ptrs(w, nw), B, H, beta, h, z, eps, a_out, h_out, trace,
                                      ws, 0);
  }, err, errlen);
}

}  // extern "C"
