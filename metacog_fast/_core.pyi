# Typed stub of the private compiled extension metacog_fast._core (csrc/). Use the public kernels in
# metacog_fast.kernels (metacog_fast/ops/<op>/); this stub is what they and type checkers see.
# tests/test_build.py checks that it names exactly what the built module exports.
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I8 = npt.NDArray[np.int8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

# --- csrc/core/module.cpp: build report, CPU path and threads -------------------------------------
def build_info() -> dict[str, Any]:
    """version, compiler, isa_compiled, isa_supported, isa_selected, openmp_threads, openmp_version,
    cuda (None, or built/version/archs/devices/runtime_version/device_names)."""
def set_isa(name: str) -> None:
    """Force a CPU path: auto, generic, avx2, avx512 or avx512_bf16."""
def selected_isa() -> str: ...
def set_num_threads(n: int) -> None: ...
def get_num_threads() -> int: ...
def linear(W: F32, bias: F32 | None, x: F32) -> F32:
    """y [B, out] = x [B, in] @ W [out, in]^T + bias [out]."""

# --- csrc/cpu/rssm.cpp: metacog_fast/ops/rssm/cpu.py ------------------------------------------------
class RssmCpu:
    """RSSM + self-assessment kernels on packed weights (docs/design.md §1.1 names)."""

    def __init__(self, weights: dict[str, F32], S: int, C: int, bf16: bool = False) -> None: ...
    def sizes(self) -> dict[str, int | bool]:
        """D, Hd, S, C, Z, A, E, N, L_actor, L_sa, bf16."""
    def img_step(self, h: F32, z: F32, a: F32, u: F32) -> tuple[F32, F32, F32]:
        """h [B, D], z [B, Z], a [B, A], u [B, S] -> (h' [B, D], z' [B, Z], prior logits [B, Z])."""
    def obs_step(self, h: F32, z: F32, a: F32, embed: F32, u: F32) -> tuple[F32, F32, F32]:
        """... embed [B, E] -> (h' [B, D], z' [B, Z], posterior logits [B, Z])."""
    def imagine(self, h0: F32, z0: F32, eps: F32, u: F32) -> tuple[F32, F32, F32]:
        """eps [H, B, A], u [H, B, S] -> (hs [H, B, D], zs [H, B, Z], actions [H, B, A])."""
    def self_assess(self, s: F32, grad: bool = False) -> tuple[F32] | tuple[F32, F32]:
        """s [B, D+Z] -> (psi [B, N],) or (psi, d(sum psi)/ds [B, D+Z])."""
    def self_regulate(self, h: F32, z: F32 | None, H: int, beta: float, eps: F32, u: F32 | None,
                      trace: bool = False) -> tuple[F32, F32, F32, F32]:
        """-> (z_t [B, Z], a_t [B, A], h_next [B, D], psi trace [H, B, N] (empty without trace))."""

# --- csrc/cpu/scoring.cpp: metacog_fast/ops/scoring/cpu.py ------------------------------------------
def score_trajectories(task_emb: F32, traj_emb: F32, weights: list[F32], biases: list[F32]) -> F32:
    """p [B] = sigmoid(MLP_silu(concat(traj_emb [B, Dtr], task_emb [B or 1, Dta])))."""
def mean_pool_l2norm(token_emb: F32, mask: F32) -> F32:
    """token_emb [B, T, D], mask [B, T] -> [B, D]."""

# --- csrc/cpu/encoder.cpp: metacog_fast/ops/encoder/cpu.py ------------------------------------------
def enc_quantize_rows(x: F32) -> tuple[I8, F32, F32]:
    """x [M, K] -> (q [M, K], scale [M], zero [M])."""
def enc_dequantize_rows(acc: I32, scale: F32, zero: F32, w_scale: F32, w_colsum: F32, bias: F32,
                        gelu: bool = False) -> F32:
    """acc [M, N] -> [M, N]."""
def enc_dequantize_gelu_quantize(acc: I32, scale: F32, zero: F32, w_scale: F32, w_colsum: F32,
                                 bias: F32) -> tuple[I8, F32, F32]: ...
def enc_dequantize_add_layernorm(acc: I32, scale: F32, zero: F32, w_scale: F32, w_colsum: F32, bias: F32,
                                 residual: F32, gamma: F32, beta: F32, eps: float) -> tuple[I8, F32, F32]:
    """residual [M, N] updated in place; returns its quantisation."""
def enc_attention(qkv: F32, lengths: I64, heads: int) -> F32:
    """qkv [B, T, 3*H*d], lengths [B] -> [B, T, H*d]."""

# --- csrc/cpu/memory_rerank.cpp: metacog_fast/ops/memory/cpu.py -------------------------------------
def memory_scores(queries: F32, keys: F32, last_access: F64, importance: F32, candidates: I64, now: float,
                  w_rec: float, w_rel: float, w_imp: float, decay: float, unit: float) -> F32:
    """queries [Q, D], keys [N, D], last_access [N], importance [N], candidates [C] or [Q, C] -> [Q, C]."""
def memory_rerank(queries: F32, keys: F32, last_access: F64, importance: F32, candidates: I64, k: int,
                  now: float, w_rec: float, w_rel: float, w_imp: float, decay: float,
                  unit: float) -> tuple[I64, F32]:
    """-> (rows [Q, k], scores [Q, k])."""
def memory_rerank_bounded(queries: F32, keys: F32, codes: I8, scale: F32, err: F32, last_access: F64,
                          importance: F32, candidates: I64, k: int, now: float, w_rec: float, w_rel: float,
                          w_imp: float, decay: float, unit: float) -> tuple[I64, F32, int]:
    """candidates [C] shared; codes [N, D] int8 -> (rows [Q, k], scores [Q, k], rows scored exactly):
    the result of memory_rerank."""

# --- csrc/cuda/rssm_bind.cpp (METACOG_BACKEND=cuda builds only): metacog_fast/ops/rssm/cuda.py ------
class _RssmCuda:
    """The ``rssm_cuda`` submodule: raw device pointers (ints), dims = (D, Hd, Z, A, E, L, N, S, C)."""

    PERSISTENT_MAX_B: int
    W_COUNT: int
    def workspace_floats(self, dims: list[int], B: int) -> int: ...
    def img_step(self, dims: list[int], w: list[int], B: int, h: int, z: int, a: int, u: int, embed: int,
                 obs: bool, h_out: int, z_out: int, logits_out: int, ws: int, stream: int) -> None: ...
    def imagine(self, dims: list[int], w: list[int], B: int, H: int, h0: int, z0: int, eps: int, u: int,
                hs: int, zs: int, acts: int, ws: int, stream: int) -> None: ...
    def self_assess(self, dims: list[int], w: list[int], B: int, s: int, psi: int, grad: int, ws: int,
                    stream: int) -> None: ...
    def self_regulate(self, dims: list[int], w: list[int], B: int, H: int, beta: float, h: int, z: int,
                      eps: int, a_out: int, h_out: int, trace: int, ws: int, stream: int) -> None: ...

rssm_cuda: _RssmCuda
