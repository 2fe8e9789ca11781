// The int8 MiniLM encoder's element-wise kernels (metacog_fast/scoring/int8_bert.py), CPU path.
// Everything between two int8 GEMMs is one pass over the rows here:
//   enc_quantize_rows               x[M,K] f32 -> (q int8 [M,K], scale [M], zero [M])
//   enc_dequantize_rows             acc[M,N] i32 -> y f32 [M,N] (optionally GELU)
//   enc_dequantize_gelu_quantize    acc -> GELU(dequantised) -> (q, scale, zero): the FFN's middle
//   enc_dequantize_add_layernorm    res <- LN(dequantised acc + res) in place, -> (q, scale, zero) of res
//   enc_attention                   qkv[B,T,3*H*d] f32, lengths[B] -> out[B,T,H*d] f32
// dequantised = acc * (scale[m] * w_scale[n]) + (zero[m] * w_colsum[n] + bias[n]).
// OpenMP over rows (or texts x heads); per-ISA loops in csrc/cpu/isa/encoder_kernels.cpp.
#include <omp.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/arrays.h"
#include "core/isa.h"
#include "core/registry.h"

namespace py = pybind11;

namespace metacog {
namespace {

using QuantRow = void (*)(const float*, std::int64_t, std::int8_t*, float*, float*);
using DequantRow = void (*)(const std::int32_t*, std::int64_t, float, float, const float*, const float*,
                            const float*, int, float*);
using DequantAddLn = void (*)(const std::int32_t*, std::int64_t, float, float, const float*, const float*,
                              const float*, float*, const float*, const float*, float);
using AttnHead = void (*)(const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                          float*, float*);

QuantRow quant_row() {
  static thread_local IsaFn<QuantRow> fn("enc_quantize_row");
  return fn.get();
}
DequantRow dequant_row() {
  static thread_local IsaFn<DequantRow> fn("enc_dequantize_row");
  return fn.get();
}
DequantAddLn dequant_add_ln() {
  static thread_local IsaFn<DequantAddLn> fn("enc_dequantize_add_ln");
  return fn.get();
}
AttnHead attn_head() {
  static thread_local IsaFn<AttnHead> fn("enc_attention_head");
  return fn.get();
}

using Quantized = std::tuple<py::array_t<std::int8_t>, py::array_t<float>, py::array_t<float>>;

// Rows per OpenMP chunk: enough work per chunk that small calls stay on one thread.
constexpr std::int64_t kRowChunk = 16;

struct Dequant {
  const std::int32_t* acc;
  const float *scale, *zero, *ws, *cs, *bias;
  std::int64_t M, N;
};

Dequant check_dequant(const py::array& acc, const py::array& scale, const py::array& zero, const py::array& ws,
                      const py::array& cs, const py::array& bias) {
  check_array<std::int32_t>(acc, "acc", {-1, -1});
  const auto M = acc.shape(0), N = acc.shape(1);
  check_array(scale, "scale", {M});
  check_array(zero, "zero", {M});
  check_array(ws, "w_scale", {N});
  check_array(cs, "w_colsum", {N});
  check_array(bias, "bias", {N});
  return {cptr<std::int32_t>(acc), cptr(scale), cptr(zero), cptr(ws), cptr(cs), cptr(bias), M, N};
}

void quantize_impl(const float* x, std::int64_t M, std::int64_t K, std::int8_t* q, float* s, float* z) {
  const auto fn = quant_row();
#pragma omp parallel for schedule(static) if (M > kRowChunk)
  for (std::int64_t r = 0; r < M; ++r) fn(x + r * K, K, q + r * K, s + r, z + r);
}

Quantized py_quantize(py::array x) {
  check_array(x, "x", {-1, -1});
  const auto M = x.shape(0), K = x.shape(1);
  py::array_t<std::int8_t> q({M, K});
  py::array_t<float> s(M), z(M);
  {
    py::gil_scoped_release nogil;
    quantize_impl(cptr(x), M, K, q.mutable_data(), s.mutable_data(), z.mutable_data());
  }
  return {q, s, z};
}

py::array_t<float> py_dequantize(py::array acc, py::array scale, py::array zero, py::array ws, py::array cs,
                                 py::array bias, bool gelu) {
  const Dequant d = check_dequant(acc, scale, zero, ws, cs, bias);
  py::array_t<float> y({d.M, d.N});
  float* Y = y.mutable_data();
  {
    py::gil_scoped_release nogil;
    const auto fn = dequant_row();
#pragma omp parallel for schedule(static) if (d.M > kRowChunk)
    for (std::int64_t r = 0; r < d.M; ++r)
      fn(d.acc + r * d.N, d.N, d.scale[r], d.zero[r], d.ws, d.cs, d.bias, gelu ? 1 : 0, Y + r * d.N);
  }
  return y;
}

Quantized py_dequantize_gelu_quantize(py::array acc, py::array scale, py::array zero, py::array ws, py::array cs,
                                      py::array bias) {
  const Dequant d = check_dequant(acc, scale, zero, ws, cs, bias);
  py::array_t<std::int8_t> q({d.M, d.N});
  py::array_t<float> s(d.M), z(d.M);
  std::int8_t* Q = q.mutable_data();
  float *S = s.mutable_data(), *Z = z.mutable_data();
  {
    py::gil_scoped_release nogil;
    const auto deq = dequant_row();
    const auto qr = quant_row();
#pragma omp parallel
    {
      std::vector<float> buf(static_cast<std::size_t>(d.N));
#pragma omp for schedule(static)
      for (std::int64_t r = 0; r < d.M; ++r) {
        deq(d.acc + r * d.N, d.N, d.scale[r], d.zero[r], d.ws, d.cs, d.bias, 1, buf.data());
        qr(buf.data(), d.N, Q + r * d.N, S + r, Z + r);
      }
    }
  }
  return {q, s, z};
}

Quantized py_dequantize_add_layernorm(py::array acc, py::array scale, py::array zero, py::array ws, py::array cs,
                                      py::array bias, py::array residual, py::array gamma, py::array beta,
                                      float eps) {
  const Dequant d = check_dequant(acc, scale, zero, ws, cs, bias);
  check_array(residual, "residual", {d.M, d.N});
  check_array(gamma, "gamma", {d.N});
  check_array(beta, "beta", {d.N});
  if (!residual.writeable()) throw py::value_error("residual: expected a writeable array (updated in place)");
  if (!(eps > 0.f)) throw py::value_error("eps: expected a positive number, got " + std::to_string(eps));
  py::array_t<std::int8_t> q({d.M, d.N});
  py::array_t<float> s(d.M), z(d.M);
  float* R = mptr(residual);
  const float *G = cptr(gamma), *Bt = cptr(beta);
  std::int8_t* Q = q.mutable_data();
  float *S = s.mutable_data(), *Z = z.mutable_data();
  {
    py::gil_scoped_release nogil;
    const auto fn = dequant_add_ln();
    const auto qr = quant_row();
#pragma omp parallel for schedule(static) if (d.M > kRowChunk)
    for (std::int64_t r = 0; r < d.M; ++r) {
      fn(d.acc + r * d.N, d.N, d.scale[r], d.zero[r], d.ws, d.cs, d.bias, R + r * d.N, G, Bt, eps);
      qr(R + r * d.N, d.N, Q + r * d.N, S + r, Z + r);
    }
  }
  return {q, s, z};
}

py::array_t<float> py_attention(py::array qkv, py::array lengths, std::int64_t heads) {
  check_array(qkv, "qkv", {-1, -1, -1});
  const auto B = qkv.shape(0), T = qkv.shape(1), C = qkv.shape(2);
  if (heads < 1 || C % (3 * heads) != 0)
    throw py::value_error("heads: qkv's last axis (" + std::to_string(C) + ") must be 3 * heads * head_dim, got heads=" +
                          std::to_string(heads));
  check_array<std::int64_t>(lengths, "lengths", {B});
  const std::int64_t d = C / (3 * heads);
  const std::int64_t* len = cptr<std::int64_t>(lengths);
  for (std::int64_t b = 0; b < B; ++b)
    if (len[b] < 1 || len[b] > T)
      throw py::value_error("lengths[" + std::to_string(b) + "]: expected 1.." + std::to_string(T) + " (the axis T of qkv), got " +
                            std::to_string(len[b]));
  py::array_t<float> out({B, T, heads * d});
  const float* X = cptr(qkv);
  float* O = out.mutable_data();
  const std::int64_t Tp = (T + 63) / 64 * 64;  // >= the kernel's padding of L (blocks of up to 4 x 16)
  const std::size_t work = static_cast<std::size_t>(d * Tp + T * d + 4 * Tp + 4 * d);  // kRows = 4
  {
    py::gil_scoped_release nogil;
    const auto fn = attn_head();
#pragma omp parallel if (B * heads > 1)
    {
      std::vector<float> buf(work);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t bh = 0; bh < B * heads; ++bh) {
        const std::int64_t b = bh / heads, h = bh % heads;
        fn(X + b * T * C, T, len[b], heads, d, h, O + b * T * heads * d, buf.data());
      }
    }
  }
  return out;
}

}  // namespace
}  // namespace metacog

METACOG_BIND(encoder) {
  m.def("enc_quantize_rows", &metacog::py_quantize, py::arg("x"),
        "(q int8 [M,K], scale [M], zero [M]) of x[M,K] float32: per row x ~ scale*q + zero, "
        "scale = (max-min)/255, zero = (max+min)/2, q = clamp(round((x-zero)/scale), -128, 127).");
  m.def("enc_dequantize_rows", &metacog::py_dequantize, py::arg("acc"), py::arg("scale"), py::arg("zero"),
        py::arg("w_scale"), py::arg("w_colsum"), py::arg("bias"), py::arg("gelu") = false,
        "y[M,N] = acc*(scale[m]*w_scale[n]) + zero[m]*w_colsum[n] + bias[n] (then exact GELU if gelu); "
        "acc int32 [M,N], the rest float32.");
  m.def("enc_dequantize_gelu_quantize", &metacog::py_dequantize_gelu_quantize, py::arg("acc"), py::arg("scale"),
        py::arg("zero"), py::arg("w_scale"), py::arg("w_colsum"), py::arg("bias"),
        "enc_quantize_rows(enc_dequantize_rows(..., gelu=True)) in one pass over the rows.");
  m.def("enc_dequantize_add_layernorm", &metacog::py_dequantize_add_layernorm, py::arg("acc"), py::arg("scale"),
        py::arg("zero"), py::arg("w_scale"), py::arg("w_colsum"), py::arg("bias"), py::arg("residual"),
        py::arg("gamma"), py::arg("beta"), py::arg("eps"),
        "residual <- LayerNorm(dequantised acc + residual)*gamma + beta, in place; returns "
        "enc_quantize_rows(residual).");
  m.def("enc_attention", &metacog::py_attention, py::arg("qkv"), py::arg("lengths"), py::arg("heads"),
        "out[B,T,H*d] = softmax(Q K^T / sqrt(d) over keys < lengths[b]) V per text and head; qkv[B,T,3*H*d] "
        "float32 (Q, K, V blocks of H*d), lengths int64 [B].");
}
