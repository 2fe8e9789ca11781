// Host API of the CUDA RSSM / self-assessment kernels (docs/design.md §1.1, §1.2).
// Plain C++ (no CUDA headers) so that the pybind11 binding, compiled by the
// host compiler, can include it. All pointers are raw device pointers passed as
// uintptr_t (float32, C-contiguous, 16-byte aligned); `stream` is a cudaStream_t.
// Errors (bad sizes, launch failures) throw std::invalid_argument / std::runtime_error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace metacog {
namespace cuda_rssm {

struct Dims {
  int D, Hd, Z, A, E, L, N, S, C;  // E = 0 when there is no obs head
};

// Order of the weight pointer list handed to every function.
// The actor / sa MLPs are packed: W0 [Hd, D+Z], WH [max(L-1,1), Hd, Hd], B/G/BE [L, Hd],
// WO [No, Hd], BO [No]; for sa also the transposes WT0 [D+Z, Hd] and WHT [max(L-1,1), Hd, Hd]
// used by the analytic backward.
enum WIdx : int {
  IMG_IN_W, IMG_IN_B, IMG_IN_G, IMG_IN_BE,
  GRU_W, GRU_G, GRU_BE,
  IMG_OUT_W, IMG_OUT_B, IMG_OUT_G, IMG_OUT_BE, IMG_LOGITS_W, IMG_LOGITS_B,
  OBS_OUT_W, OBS_OUT_B, OBS_OUT_G, OBS_OUT_BE, OBS_LOGITS_W, OBS_LOGITS_B,
  ACT_W0, ACT_WH, ACT_B, ACT_G, ACT_BE, ACT_WO, ACT_BO,
  SA_W0, SA_WH, SA_B, SA_G, SA_BE, SA_WO, SA_BO, SA_WT0, SA_WHT,
  W_COUNT
};

// Batches up to this size run the persistent cooperative kernel (one launch, whole grid,
// grid-wide sync between layers); larger batches run one block per tile of this many rows.
constexpr int kPersistentMaxB = 8;

// Floats of device workspace the functions need for batch B.
std::size_t workspace_floats(const Dims& d, int B);

// h_next [B,D], z_next [B,Z] one-hot, logits [B,Z]. obs=false: prior (img_out/img_logits);
// obs=true: posterior from [h_next, embed [B,E]] (obs_out/obs_logits).
void img_step(const Dims& d, const std::vector<std::uintptr_t>& w, int B, std::uintptr_t h, std::uintptr_t z,
              std::uintptr_t a, std::uintptr_t u, std::uintptr_t embed, bool obs, std::uintptr_t h_out,
              std::uintptr_t z_out, std::uintptr_t logits_out, std::uintptr_t ws, std::uintptr_t stream);

// eps [H,B,A], u [H,B,S] -> hs [H,B,D], zs [H,B,Z], acts [H,B,A]; one launch.
void imagine(const Dims& d, const std::vector<std::uintptr_t>& w, int B, int H, std::uintptr_t h0,
             std::uintptr_t z0, std::uintptr_t eps, std::uintptr_t u, std::uintptr_t hs, std::uintptr_t zs,
             std::uintptr_t acts, std::uintptr_t ws, std::uintptr_t stream);

// psi [B,N] = sigmoid(sa(s [B,D+Z])); grad (0 = none) [B,D+Z] = d(sum psi)/ds.
void self_assess(const Dims& d, const std::vector<std::uintptr_t>& w, int B, std::uintptr_t s,
                 std::uintptr_t psi, std::uintptr_t grad, std::uintptr_t ws, std::uintptr_t stream);

// MUSE Algorithm 1: h [B,D], z [B,Z], eps [H+1,B,A] -> a_out [B,A], h_out [B,D],
// trace (0 = none) [H,B,N]; one launch.
void self_regulate(const Dims& d, const std::vector<std::uintptr_t>& w, int B, int H, float beta,
                   std::uintptr_t h, std::uintptr_t z, std::uintptr_t eps, std::uintptr_t a_out,
                   std::uintptr_t h_out, std::uintptr_t trace, std::uintptr_t ws, std::uintptr_t stream);

}  // namespace cuda_rssm
}  // namespace metacog
