"""CUDA backend of the RSSM and self-assessment kernels (docs/design.md §1.1, §1.2).

Same functions and signatures as :mod:`metacog_fast.ops.rssm.triton`, on torch CUDA
tensors; the work is done by ``metacog_fast._core.rssm_cuda`` (csrc/cuda/rssm.cu) on raw
device pointers, on the current torch stream. Batches of at most
``PERSISTENT_MAX_B`` (8) rows run one persistent cooperative kernel per call (a whole
``self_regulate`` decision, all H iterations, in one launch); larger batches run one block
per tile of 8 rows. Outputs are freshly allocated; the device workspace is sized once per
(sizes, batch, device) and reused.

Shapes: ``h [B, D]``, ``z [B, Z]``, ``a [B, A]``, ``embed [B, E]``, ``u [B, S]``,
``s [B, D+Z]``, ``eps [H(+1), B, A]``, ``psi [B, N]``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from metacog_fast._backend import BackendUnavailable, core
from metacog_fast.ops.rssm.pack import check_tensor, dims_of, packed, prior_sample, split_u, weights_on
from metacog_fast.ops.rssm.sizes import RssmSizes

# Weight pointer order of csrc/cuda/rssm.cuh (enum WIdx).
_HEAD_NAMES = ["w", "b", "ln.g", "ln.b"]
_IMG_NAMES = (
    [f"img_in.{n}" for n in _HEAD_NAMES]
    + ["gru.w", "gru.ln.g", "gru.ln.b"]
    + [f"img_out.{n}" for n in _HEAD_NAMES]
    + ["img_logits.w", "img_logits.b"]
)
_OBS_NAMES = [f"obs_out.{n}" for n in _HEAD_NAMES] + ["obs_logits.w", "obs_logits.b"]


def _ext():
    """The compiled ``rssm_cuda`` submodule, or :class:`BackendUnavailable` with the way to get it."""
    mod = getattr(core(), "rssm_cuda", None)
    if mod is None:
        raise BackendUnavailable(
            "backend='cuda': this build of metacog_fast._core has no CUDA kernels; rebuild with "
            "METACOG_BACKEND=cuda pip install --no-build-isolation -e . (needs nvcc)"
        )
    return mod


def _aligned(t: torch.Tensor) -> torch.Tensor:
    # the kernels read weights as float4 when a row length is a multiple of 4
    return t if t.data_ptr() % 16 == 0 else t.clone()


@dataclass
class _CudaPack:
    """Device pointers in WIdx order plus the tensors that own them."""

    ptrs: list[int]
    keep: list[torch.Tensor]


_PACKS: dict = {}


W_COUNT = 35
"""Length of the weight pointer list (enum WIdx in csrc/cuda/rssm.cuh)."""


def pack_tensors(w: Mapping[str, torch.Tensor], dims: RssmSizes, device: torch.device) -> list[torch.Tensor | None]:
    """The W_COUNT weight tensors in WIdx order (None for an absent obs head), 16-byte aligned."""
    tensors = weights_on(w, _IMG_NAMES, device)
    tensors += weights_on(w, _OBS_NAMES, device) if dims.E > 0 else [None] * len(_OBS_NAMES)
    act = packed(w, "actor")
    sa = packed(w, "sa")
    for p in (act, sa):
        if p.w0.device != device:
            raise ValueError(f"w: expected every weight on {device}, got {p.w0.device}")
    tensors += [act.w0, act.wh, act.b, act.g, act.be, act.wo, act.bo]
    tensors += [sa.w0, sa.wh, sa.b, sa.g, sa.be, sa.wo, sa.bo]
    tensors += [sa.w0.t().contiguous(), sa.wh.transpose(1, 2).contiguous()]  # for the analytic backward
    assert len(tensors) == W_COUNT
    return [None if t is None else _aligned(t) for t in tensors]


def _pack(w: Mapping[str, torch.Tensor], dims: RssmSizes, device: torch.device) -> _CudaPack:
    names = sorted(w)
    key = (str(device), tuple((k, w[k].data_ptr(), w[k]._version) for k in names))
    hit = _PACKS.get(key)
    if hit is not None:
        return hit
    if len(_PACKS) > 16:
        _PACKS.clear()
    ext = _ext()
    if ext.W_COUNT != W_COUNT:
        raise RuntimeError(f"rssm_cuda: this wrapper packs {W_COUNT} weights, the extension expects {ext.W_COUNT}")
    tensors = pack_tensors(w, dims, device)
    pack = _CudaPack([0 if t is None else t.data_ptr() for t in tensors], [t for t in tensors if t is not None])
    _PACKS[key] = pack
    return pack


_WS: dict = {}


def _workspace(dims_t: tuple[int, ...], B: int, device: torch.device) -> torch.Tensor:
    key = (dims_t, B, str(device))
    ws = _WS.get(key)
    if ws is None:
        if len(_WS) > 32:
            _WS.clear()
        ws = torch.empty(int(_ext().workspace_floats(list(dims_t), B)), device=device, dtype=torch.float32)
        _WS[key] = ws
    return ws


def _device_of(x: torch.Tensor, name: str) -> torch.device:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cuda":
        raise ValueError(f"{name}: backend 'cuda' needs CUDA tensors, got a tensor on {x.device}")
    return x.device


def _dims_tuple(d: RssmSizes, S: int, C: int) -> tuple[int, ...]:
    return (d.D, d.Hd, d.Z, d.A, d.E, d.L, d.N, S, C)


def _stream(device: torch.device) -> int:
    return int(torch.cuda.current_stream(device).cuda_stream)


def _on_device(device: torch.device):
    """Make ``device`` current for the kernel launch (the runtime launches on the current device)."""
    return torch.cuda.device(device)


def _step(w, h, z, a, u, embed, obs: bool, classes: int | None):
    dims = dims_of(w)
    dev = _device_of(h, "h")
    B = h.shape[0] if h.dim() == 2 else -1
    h = check_tensor(h, "h", (B, dims.D), dev)
    z = check_tensor(z, "z", (B, dims.Z), dev)
    a = check_tensor(a, "a", (B, dims.A), dev)
    if obs:
        if dims.E <= 0:
            raise KeyError("w: missing weight 'obs_out.w' needed by obs_step")
        embed = check_tensor(embed, "embed", (B, dims.E), dev)
    S, C = split_u(u, "u", (B,), dims.Z, classes)
    u = check_tensor(u, "u", (B, S), dev)
    dt = _dims_tuple(dims, S, C)
    pack = _pack(w, dims, dev)
    hn = torch.empty(B, dims.D, device=dev, dtype=torch.float32)
    zn = torch.empty(B, dims.Z, device=dev, dtype=torch.float32)
    lo = torch.empty(B, dims.Z, device=dev, dtype=torch.float32)
    with _on_device(dev):
        _ext().img_step(list(dt), pack.ptrs, B, h.data_ptr(), z.data_ptr(), a.data_ptr(), u.data_ptr(),
                        embed.data_ptr() if obs else 0, obs, hn.data_ptr(), zn.data_ptr(), lo.data_ptr(),
                        _workspace(dt, B, dev).data_ptr(), _stream(dev))
    return hn, zn, lo


def img_step(w: Mapping[str, torch.Tensor], h: torch.Tensor, z: torch.Tensor, a: torch.Tensor,
             u: torch.Tensor, classes: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One prior step -> ``(h_next [B,D], z_next [B,Z] one-hot, prior_logits [B,Z])``."""
    return _step(w, h, z, a, u, None, False, classes)


def obs_step(w: Mapping[str, torch.Tensor], h: torch.Tensor, z: torch.Tensor, a: torch.Tensor,
             embed: torch.Tensor, u: torch.Tensor, classes: int | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One posterior step -> ``(h_next [B,D], z_post [B,Z] one-hot, post_logits [B,Z])``."""
    return _step(w, h, z, a, u, embed, True, classes)


def imagine(w: Mapping[str, torch.Tensor], h0: torch.Tensor, z0: torch.Tensor, eps: torch.Tensor,
            u: torch.Tensor, classes: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """H imagined steps in one launch -> ``(hs [H,B,D], zs [H,B,Z], actions [H,B,A])``."""
    dims = dims_of(w)
    dev = _device_of(h0, "h0")
    B = h0.shape[0] if h0.dim() == 2 else -1
    if eps.dim() != 3:
        raise ValueError(f"eps: expected shape [H, B, A], got {list(eps.shape)}")
    H = int(eps.shape[0])
    h0 = check_tensor(h0, "h0", (B, dims.D), dev)
    z0 = check_tensor(z0, "z0", (B, dims.Z), dev)
    eps = check_tensor(eps, "eps", (H, B, dims.A), dev)
    S, C = split_u(u, "u", (H, B), dims.Z, classes)
    u = check_tensor(u, "u", (H, B, S), dev)
    hs = torch.empty(H, B, dims.D, device=dev, dtype=torch.float32)
    zs = torch.empty(H, B, dims.Z, device=dev, dtype=torch.float32)
    acts = torch.empty(H, B, dims.A, device=dev, dtype=torch.float32)
    if H == 0:
        return hs, zs, acts
    dt = _dims_tuple(dims, S, C)
    pack = _pack(w, dims, dev)
    with _on_device(dev):
        _ext().imagine(list(dt), pack.ptrs, B, H, h0.data_ptr(), z0.data_ptr(), eps.data_ptr(), u.data_ptr(),
                       hs.data_ptr(), zs.data_ptr(), acts.data_ptr(), _workspace(dt, B, dev).data_ptr(), _stream(dev))
    return hs, zs, acts


def self_assess(w: Mapping[str, torch.Tensor], s: torch.Tensor, grad: bool = False):
    """``psi [B,N]``, or with ``grad`` ``(psi, d(sum psi)/ds [B, D+Z])`` (analytic, same launch)."""
    dims = dims_of(w)
    dev = _device_of(s, "s")
    if s.dim() != 2:
        raise ValueError(f"s: expected shape [B, D+Z={dims.D + dims.Z}], got {list(s.shape)}")
    B = s.shape[0]
    s = check_tensor(s, "s", (B, dims.D + dims.Z), dev)
    dt = _dims_tuple(dims, 1, dims.Z)
    pack = _pack(w, dims, dev)
    psi = torch.empty(B, dims.N, device=dev, dtype=torch.float32)
    g = torch.empty(B, dims.D + dims.Z, device=dev, dtype=torch.float32) if grad else None
    with _on_device(dev):
        _ext().self_assess(list(dt), pack.ptrs, B, s.data_ptr(), psi.data_ptr(), 0 if g is None else g.data_ptr(),
                           _workspace(dt, B, dev).data_ptr(), _stream(dev))
    return (psi, g) if grad else psi


def self_regulate(w: Mapping[str, torch.Tensor], h: torch.Tensor, z: torch.Tensor | None, H: int, beta: float,
                  eps: torch.Tensor, trace: bool = False, *, u: torch.Tensor | None = None,
                  classes: int | None = None):
    """MUSE Algorithm 1 in ONE launch -> ``(z_t, a_t [B,A], h_next [B,D])`` (+ ``psi_trace [H,B,N]``).
    ``z=None``: z_t is sampled from the prior of h with ``u [B, S]`` first (by the reference)."""
    if z is None:
        z = prior_sample(w, h, u, classes)
    dims = dims_of(w)
    dev = _device_of(h, "h")
    B = h.shape[0] if h.dim() == 2 else -1
    H = int(H)
    if H < 0:
        raise ValueError(f"H: expected a non-negative number of iterations, got {H}")
    h = check_tensor(h, "h", (B, dims.D), dev)
    z = check_tensor(z, "z", (B, dims.Z), dev)
    eps = check_tensor(eps, "eps", (H + 1, B, dims.A), dev)
    dt = _dims_tuple(dims, 1, dims.Z)
    pack = _pack(w, dims, dev)
    a_t = torch.empty(B, dims.A, device=dev, dtype=torch.float32)
    h_next = torch.empty(B, dims.D, device=dev, dtype=torch.float32)
    tr = torch.empty(H, B, dims.N, device=dev, dtype=torch.float32) if trace else None
    with _on_device(dev):
        _ext().self_regulate(list(dt), pack.ptrs, B, H, float(beta), h.data_ptr(), z.data_ptr(), eps.data_ptr(),
                             a_t.data_ptr(), h_next.data_ptr(), 0 if tr is None else tr.data_ptr(),
                             _workspace(dt, B, dev).data_ptr(), _stream(dev))
    out = (z, a_t, h_next)
    return out + (tr,) if trace else out
