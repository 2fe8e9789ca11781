// The one private extension, metacog_fast._core. Kernel files bind themselves
// through METACOG_BIND (csrc/core/registry.h); this file only adds the build
// report and the ISA controls.
#include <omp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "core/arrays.h"
#include "core/isa.h"
#include "core/registry.h"
#include "cpu/linear.h"

#ifndef METACOG_VERSION
#define METACOG_VERSION "0.0.0"
#endif

#ifdef METACOG_WITH_CUDA
extern "C" int metacog_cuda_device_count();
extern "C" int metacog_cuda_runtime_version();
extern "C" int metacog_cuda_device_name(int device, char* buf, int len);
#endif

namespace py = pybind11;
using namespace metacog;

static py::dict build_info() {
  py::dict d;
  d["version"] = METACOG_VERSION;
  d["isa_compiled"] = compiled_isas();
  d["isa_supported"] = supported_isas();
  d["isa_selected"] = std::string(isa_name(selected_isa()));
  d["openmp_threads"] = omp_get_max_threads();
  d["openmp_version"] = static_cast<int>(_OPENMP);
  d["compiler"] = std::string(__VERSION__);
#ifdef METACOG_WITH_CUDA
  py::dict cuda;
  cuda["built"] = true;
  cuda["version"] = METACOG_CUDA_VERSION;
  cuda["archs"] = METACOG_CUDA_ARCHS;
  int n = metacog_cuda_device_count();
  cuda["devices"] = n;
  cuda["runtime_version"] = metacog_cuda_runtime_version();
  py::list names;
  for (int i = 0; i < n; ++i) {
    char buf[256] = {0};
    metacog_cuda_device_name(i, buf, sizeof(buf));
    names.append(std::string(buf));
  }
  cuda["device_names"] = names;
  d["cuda"] = cuda;
#else
  d["cuda"] = py::none();
#endif
  return d;
}

static py::array_t<float> py_linear(py::array W, py::object bias, py::array x) {
  check_array(W, "W", {-1, -1});
  const auto out = W.shape(0), in = W.shape(1);
  check_array(x, "x", {-1, in});
  const float* bptr = nullptr;
  py::array b;
  if (!bias.is_none()) {
    b = bias.cast<py::array>();
    check_array(b, "bias", {out});
    bptr = cptr(b);
  }
  const auto B = x.shape(0);
  py::array_t<float> y({B, out});
  {
    py::gil_scoped_release nogil;
    linear_f32(cptr(W), bptr, cptr(x), y.mutable_data(), B, out, in);
  }
  return y;
}

PYBIND11_MODULE(_core, m) {
  m.doc() = "metacog_fast compiled core (private; use metacog_fast.kernels)";
  m.def("build_info", &build_info, "What this build contains and which CPU path is selected.");
  m.def("set_isa", &set_isa, py::arg("name"),
        "Force a CPU path: auto, generic, avx2, avx512 or avx512_bf16.");
  m.def("selected_isa", [] { return std::string(isa_name(selected_isa())); });
  m.def("set_num_threads", [](int n) {
    if (n < 1) throw py::value_error("n: expected a positive thread count");
    omp_set_num_threads(n);
  }, py::arg("n"));
  m.def("get_num_threads", [] { return omp_get_max_threads(); });
  m.def("linear", &py_linear, py::arg("W"), py::arg("bias"), py::arg("x"),
        "y[B,out] = x[B,in] @ W[out,in]^T + bias (float32, C-contiguous).");
  for (auto& [name, fn] : binding_registry()) fn(m);
}
