// Python bindings of the CUDA RSSM kernels (csrc/cuda/rssm.cu) as metacog_fast._core.rssm_cuda.
// Only built with METACOG_BACKEND=cuda. Raw device pointers come in as ints (torch
// tensor.data_ptr()) and the stream as torch.cuda.current_stream().cuda_stream; the
// wrapper metacog_fast/ops/rssm/cuda.py validates shapes, dtypes and devices first.
#ifdef METACOG_WITH_CUDA
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <vector>

#include "core/registry.h"
#include "cuda/rssm.cuh"

namespace py = pybind11;
using metacog::cuda_rssm::Dims;
using Ptrs = std::vector<std::uintptr_t>;

static Dims to_dims(const std::array<int, 9>& v) {
  return Dims{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
}

METACOG_BIND(rssm_cuda) {
  namespace cr = metacog::cuda_rssm;
  auto sm = m.def_submodule("rssm_cuda",
                            "CUDA RSSM kernels on raw device pointers (private; use metacog_fast.kernels). "
                            "dims = (D, Hd, Z, A, E, L, N, S, C); w = device pointers in WEIGHT_ORDER.");
  sm.attr("PERSISTENT_MAX_B") = cr::kPersistentMaxB;
  sm.attr("W_COUNT") = static_cast<int>(cr::W_COUNT);
  sm.def("workspace_floats", [](std::array<int, 9> dims, int B) { return cr::workspace_floats(to_dims(dims), B); },
         py::arg("dims"), py::arg("B"));
  sm.def(
      "img_step",
      [](std::array<int, 9> dims, Ptrs w, int B, std::uintptr_t h, std::uintptr_t z, std::uintptr_t a,
         std::uintptr_t u, std::uintptr_t embed, bool obs, std::uintptr_t h_out, std::uintptr_t z_out,
         std::uintptr_t lo_out, std::uintptr_t ws, std::uintptr_t stream) {
        py::gil_scoped_release nogil;
        cr::img_step(to_dims(dims), w, B, h, z, a, u, embed, obs, h_out, z_out, lo_out, ws, stream);
      },
      py::arg("dims"), py::arg("w"), py::arg("B"), py::arg("h"), py::arg("z"), py::arg("a"), py::arg("u"),
      py::arg("embed"), py::arg("obs"), py::arg("h_out"), py::arg("z_out"), py::arg("logits_out"), py::arg("ws"),
      py::arg("stream"));
  sm.def(
      "imagine",
      [](std::array<int, 9> dims, Ptrs w, int B, int H, std::uintptr_t h0, std::uintptr_t z0, std::uintptr_t eps,
         std::uintptr_t u, std::uintptr_t hs, std::uintptr_t zs, std::uintptr_t acts, std::uintptr_t ws,
         std::uintptr_t stream) {
        py::gil_scoped_release nogil;
        cr::imagine(to_dims(dims), w, B, H, h0, z0, eps, u, hs, zs, acts, ws, stream);
      },
      py::arg("dims"), py::arg("w"), py::arg("B"), py::arg("H"), py::arg("h0"), py::arg("z0"), py::arg("eps"),
      py::arg("u"), py::arg("hs"), py::arg("zs"), py::arg("acts"), py::arg("ws"), py::arg("stream"));
  sm.def(
      "self_assess",
      [](std::array<int, 9> dims, Ptrs w, int B, std::uintptr_t s, std::uintptr_t psi, std::uintptr_t grad,
         std::uintptr_t ws, std::uintptr_t stream) {
        py::gil_scoped_release nogil;
        cr::self_assess(to_dims(dims), w, B, s, psi, grad, ws, stream);
      },
      py::arg("dims"), py::arg("w"), py::arg("B"), py::arg("s"), py::arg("psi"), py::arg("grad"), py::arg("ws"),
      py::arg("stream"));
  sm.def(
      "self_regulate",
      [](std::array<int, 9> dims, Ptrs w, int B, int H, float beta, std::uintptr_t h, std::uintptr_t z,
         std::uintptr_t eps, std::uintptr_t a_out, std::uintptr_t h_out, std::uintptr_t trace, std::uintptr_t ws,
         std::uintptr_t stream) {
        py::gil_scoped_release nogil;
        cr::self_regulate(to_dims(dims), w, B, H, beta, h, z, eps, a_out, h_out, trace, ws, stream);
      },
      py::arg("dims"), py::arg("w"), py::arg("B"), py::arg("H"), py::arg("beta"), py::arg("h"), py::arg("z"),
      py::arg("eps"), py::arg("a_out"), py::arg("h_out"), py::arg("trace"), py::arg("ws"), py::arg("stream"));
}
#endif  // METACOG_WITH_CUDA
