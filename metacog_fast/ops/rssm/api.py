"""RSSM and MUSE self-assessment / self-regulation kernels: public API, checks and the dispatch table.

docs/design.md §1.1, §1.2; docs/kernels.md has the full contract. Backends (one table,
:data:`TABLE`): ``"torch"`` (:mod:`.naive`, the readable reference), ``"cpu"`` (:mod:`.cpu`,
compiled core, fp32 or ``precision="bf16"`` weights), ``"cuda"`` / ``"triton"`` (:mod:`.cuda`,
:mod:`.triton`). Every backend module has the five functions of the reference with its
signatures; the first argument is the weights prepared for that backend.

Inputs are numpy arrays or torch tensors (float32; other float dtypes and
non-contiguous layouts are converted); the outputs have the type (and device)
of the state argument. Noise: ``u`` uniforms for the categorical samples and
``eps`` standard normals for the actor; when missing they are drawn in Python
from ``numpy.random.default_rng(seed)`` (``eps`` first, then ``u``) so that
every backend sees identical noise.

Fast path: ``check=False`` skips the per-call shape and NaN/inf checks of the inputs and the
range check of ``u`` (the weights are still validated once per mapping, dtypes and layouts
still converted); for callers that built their inputs with the right shapes themselves.
"""
from __future__ import annotations

import collections
import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from metacog_fast._backend import BackendUnavailable, core
from metacog_fast.ops._alloc import check_alloc
from metacog_fast.ops._dispatch import DispatchTable
from metacog_fast.ops.rssm.sizes import DEFAULT_CLASSES, RssmSizes, infer_sizes, weight_names
from metacog_fast.ops.rssm.weights import PRESETS, init_rssm_weights

__all__ = [
    "PRECISIONS", "PRESETS", "RssmSizes", "Sizes", "TABLE", "clear_cache", "infer_sizes", "init_rssm_weights",
    "resolved_backend", "rssm_imagine", "rssm_img_step", "rssm_obs_step", "self_assess", "self_regulate",
    "weight_names",
]

Array = Any  # numpy.ndarray | torch.Tensor

PRECISIONS = ("fp32", "bf16")
Sizes = RssmSizes
"""The sizes type under its earlier name."""

TABLE = DispatchTable("rssm", {
    "torch": "metacog_fast.ops.rssm.naive",
    "cpu": "metacog_fast.ops.rssm.cpu",
    "cuda": "metacog_fast.ops.rssm.cuda",
    "triton": "metacog_fast.ops.rssm.triton",
})
NUMPY_BACKENDS = ("cpu",)
"""Backends that compute on numpy arrays (the others on torch tensors)."""


# --- conversions ----------------------------------------------------------------------


def _is_torch(x: Any) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return isinstance(x, torch.Tensor)


def _to_numpy(x: Any, name: str) -> np.ndarray:
    """float32 C-contiguous numpy view/copy of x; TypeError for non-float data."""
    if _is_torch(x):
        if not x.is_floating_point():
            raise TypeError(f"{name}: expected a float32 tensor, got dtype {x.dtype}")
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if x.dtype != _torch().float32:
            x = x.float()
        return np.ascontiguousarray(x.numpy())
    if not isinstance(x, np.ndarray):
        if isinstance(x, (list, tuple)):
            x = np.asarray(x)
        else:
            raise TypeError(f"{name}: expected a numpy array or torch tensor, got {type(x).__name__}")
    if x.dtype.kind != "f":
        raise TypeError(f"{name}: expected float32 data, got dtype {x.dtype}")
    return np.ascontiguousarray(x, dtype=np.float32)


def _torch():
    import torch

    return torch


def _to_torch(x: Any, name: str, device: Any) -> Any:
    torch = _torch()
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise TypeError(f"{name}: expected a float32 tensor, got dtype {x.dtype}")
        return x.detach().to(device=device, dtype=torch.float32).contiguous()
    return torch.from_numpy(_to_numpy(x, name)).to(device)


def _check_shape(x: np.ndarray | Any, name: str, shape: tuple[int | None, ...], what: str) -> None:
    got = tuple(int(d) for d in x.shape)
    if len(got) != len(shape) or any(s is not None and s != g for s, g in zip(shape, got)):
        want = ", ".join(str(s) if s is not None else "?" for s in shape)
        raise ValueError(f"{name}: expected shape [{want}] ({what}), got {list(got)}")


def _check_finite(x: Any, name: str) -> None:
    ok = bool(_torch().isfinite(x).all()) if _is_torch(x) else bool(np.isfinite(x).all())
    if not ok:
        raise ValueError(f"{name}: contains NaN or Inf")


# --- prepared weights (validated once, cached per weights mapping) -----------------------


class _Prepared:
    """Validated weights converted for one backend (the first argument of its functions)."""

    def __init__(self, w: Mapping[str, Any], sz: RssmSizes, backend: str, precision: str, device: Any) -> None:
        self.sizes = sz
        self.backend = backend
        self.precision = precision
        self.fingerprint = _fingerprint(w)
        self.keep = list(w.values())  # keeps ids in the fingerprint from being reused
        names = weight_names(sz)
        if backend in NUMPY_BACKENDS:
            arrays = {k: _to_numpy(w[k], f"weights[{k!r}]") for k in names}
        else:
            arrays = {k: _to_torch(w[k], f"weights[{k!r}]", device) for k in names}
        for k, v in arrays.items():
            _check_finite(v, f"weights[{k!r}]")
        impl = TABLE.impl(backend)
        self.state = impl.prepare(arrays, sz, precision) if hasattr(impl, "prepare") else arrays


def _fingerprint(w: Mapping[str, Any]) -> tuple:
    return tuple((k, id(v), getattr(v, "_version", None)) for k, v in w.items())


_CACHE: "collections.OrderedDict[tuple, _Prepared]" = collections.OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 8


def clear_cache() -> None:
    """Forget every prepared weights mapping (call after modifying numpy weights in place)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def _prepare(w: Mapping[str, Any], classes: int | None, backend: str, precision: str, device: Any) -> _Prepared:
    """The prepared weights for this call. ``classes=None`` (an operation that never splits z):
    any layout already prepared for ``w`` serves; else C = 32 when it divides Z, else C = Z."""
    if classes is None:
        with _CACHE_LOCK:
            for key, p in reversed(_CACHE.items()):
                if key[0] == id(w) and key[2:] == (backend, precision, str(device)) and p.fingerprint == _fingerprint(w):
                    _CACHE.move_to_end(key)
                    return p
        Z = infer_sizes(w, None).Z
        classes = DEFAULT_CLASSES if Z % DEFAULT_CLASSES == 0 else Z
    key = (id(w), classes, backend, precision, str(device))
    with _CACHE_LOCK:
        p = _CACHE.get(key)
        if p is not None and p.fingerprint == _fingerprint(w):
            _CACHE.move_to_end(key)
            return p
    sz = infer_sizes(w, classes)
    p = _Prepared(w, sz, backend, precision, device)
    with _CACHE_LOCK:
        _CACHE[key] = p
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return p


# --- one call -------------------------------------------------------------------------------


@dataclass
class _Call:
    """One resolved call: backend, its module, prepared weights, input and output conversion."""

    backend: str
    prep: _Prepared
    as_torch: bool
    device: Any
    check: bool = True

    @property
    def sizes(self) -> RssmSizes:
        return self.prep.sizes

    @property
    def impl(self) -> Any:
        return TABLE.impl(self.backend)

    def arg(self, x: Any, name: str, shape: tuple[int | None, ...], what: str, finite: bool = True) -> Any:
        """Convert an input for this backend and check its shape (and NaN) unless ``check=False``."""
        if self.backend in NUMPY_BACKENDS:
            y = _to_numpy(x, name)
        else:
            y = _to_torch(x, name, self.device)
        if self.check:
            _check_shape(y, name, shape, what)
            if finite:
                _check_finite(y, name)
        return y

    def uniforms(self, u: Any, shape: tuple[int, ...], what: str, rng: Any) -> Any:
        """``u`` (drawn from ``rng`` when None) converted and checked to lie in [0, 1)."""
        u_ = self.arg(_noise(rng, "u", shape) if u is None else u, "u", shape, what)
        if self.check:
            _check_u(u_, "u")
        return u_

    def no_grad(self) -> Any:
        """The reference's autograd off for the whole-call kernels (imagine, self_regulate)."""
        return contextlib.nullcontext() if self.backend in NUMPY_BACKENDS else _torch().no_grad()

    def out(self, y: Any) -> Any:
        if self.as_torch:
            torch = _torch()
            return (torch.from_numpy(y) if isinstance(y, np.ndarray) else y).to(self.device)
        return y if isinstance(y, np.ndarray) else y.detach().cpu().numpy()


def _resolve_classes(classes: int | None, w: Mapping[str, Any], u: Any) -> int:
    """C: ``classes`` when given; else from the last axis of ``u`` ([..., S]); else 32."""
    if classes is not None:
        return classes
    if u is not None and getattr(u, "ndim", 0) >= 1 and int(u.shape[-1]) > 0:
        if not isinstance(w, Mapping) or "img_logits.w" not in w:
            infer_sizes(w, None)  # raises naming what is wrong
        Z = int(w["img_logits.w"].shape[0])
        S = int(u.shape[-1])
        if Z % S:
            raise ValueError(f"u: last axis S={S} must divide Z={Z} (img_logits.w rows)")
        return Z // S
    return DEFAULT_CLASSES


def _begin(w: Mapping[str, Any], ref: Any, ref_name: str, backend: str, precision: str, classes: int | None,
           check: bool = True) -> _Call:
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    if not (_is_torch(ref) or isinstance(ref, np.ndarray)):
        raise TypeError(f"{ref_name}: expected a numpy array or torch tensor, got {type(ref).__name__}")
    as_torch = _is_torch(ref)
    on_gpu = as_torch and ref.device.type == "cuda"
    be = TABLE.resolve(backend, on_gpu=on_gpu, has=_available())
    if precision == "bf16" and be != "cpu":
        raise ValueError(f"precision='bf16' is a cpu-backend option; backend resolved to {be!r}")
    if be in NUMPY_BACKENDS:
        device = "cpu"
    elif be in ("cuda", "triton"):
        # triton on CPU tensors runs under TRITON_INTERPRET=1; numpy inputs go to the GPU when there is one
        torch = _torch()
        device = ref.device if as_torch else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = ref.device if as_torch else "cpu"
    prep = _prepare(w, classes, be, precision, device)
    return _Call(be, prep, as_torch, device if as_torch else "cpu", bool(check))


def resolved_backend(w: Mapping[str, Any], x: Array, backend: str = "auto", precision: str = "fp32") -> str:
    """The backend the kernels of this module run for weights ``w`` and a state ``x`` (numpy or
    torch, its device counts) when asked for ``backend``: what ``"auto"`` turns into."""
    return _begin(w, x, "x", backend, precision, None).backend


def _available() -> tuple[str, ...]:
    """Backends this op implements in this build (cpu only when the core has RssmCpu)."""
    try:
        has_cpu = TABLE.impl("cpu").available()
    except BackendUnavailable:
        has_cpu = True  # resolve_backend then reports the missing core itself
    return TABLE.backends if has_cpu else tuple(b for b in TABLE.backends if b != "cpu")


def _rng(seed: Any) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _noise(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "eps":
        return rng.standard_normal(shape, dtype=np.float32)
    return rng.random(shape, dtype=np.float32)


def _check_u(u: Any, name: str) -> None:
    bad = bool(((u < 0) | (u >= 1)).any())
    if bad:
        raise ValueError(f"{name}: uniforms must lie in [0, 1)")


# --- public kernels ---------------------------------------------------------------------------


def rssm_img_step(
    w: Mapping[str, Array],
    h: Array,
    z: Array,
    a: Array,
    u: Array | None = None,
    *,
    seed: Any = None,
    classes: int | None = None,
    backend: str = "auto",
    precision: str = "fp32",
    check: bool = True,
) -> tuple[Array, Array, Array]:
    """One imagination step: h [B, D], z [B, Z], a [B, A], u [B, S] ->
    (h' [B, D], z' one-hot prior sample [B, Z], prior logits [B, Z])."""
    c = _begin(w, h, "h", backend, precision, _resolve_classes(classes, w, u), check)
    sz = c.sizes
    h_ = c.arg(h, "h", (None, sz.D), "B, D")
    B = h_.shape[0]
    z_ = c.arg(z, "z", (B, sz.Z), "B, Z")
    a_ = c.arg(a, "a", (B, sz.A), "B, A")
    u_ = c.uniforms(u, (B, sz.S), "B, S", None if u is not None else _rng(seed))
    outs = c.impl.img_step(c.prep.state, h_, z_, a_, u_, sz.C)
    return tuple(c.out(o) for o in outs)  # type: ignore[return-value]


def rssm_obs_step(
    w: Mapping[str, Array],
    h: Array,
    z: Array,
    a: Array,
    embed: Array,
    u: Array | None = None,
    *,
    seed: Any = None,
    classes: int | None = None,
    backend: str = "auto",
    precision: str = "fp32",
    check: bool = True,
) -> tuple[Array, Array, Array]:
    """One observation step: h [B, D], z [B, Z], a [B, A], embed [B, E], u [B, S] ->
    (h' [B, D], z' one-hot posterior sample [B, Z], posterior logits [B, Z])."""
    c = _begin(w, h, "h", backend, precision, _resolve_classes(classes, w, u), check)
    sz = c.sizes
    h_ = c.arg(h, "h", (None, sz.D), "B, D")
    B = h_.shape[0]
    z_ = c.arg(z, "z", (B, sz.Z), "B, Z")
    a_ = c.arg(a, "a", (B, sz.A), "B, A")
    e_ = c.arg(embed, "embed", (B, sz.E), "B, E")
    u_ = c.uniforms(u, (B, sz.S), "B, S", None if u is not None else _rng(seed))
    outs = c.impl.obs_step(c.prep.state, h_, z_, a_, e_, u_, sz.C)
    return tuple(c.out(o) for o in outs)  # type: ignore[return-value]


def rssm_imagine(
    w: Mapping[str, Array],
    h0: Array,
    z0: Array,
    H: int = 15,
    eps: Array | None = None,
    u: Array | None = None,
    *,
    seed: Any = None,
    classes: int | None = None,
    backend: str = "auto",
    precision: str = "fp32",
    check: bool = True,
) -> tuple[Array, Array, Array]:
    """H actor-driven imagination steps in one call.

    h0 [B, D], z0 [B, Z], eps [H, B, A], u [H, B, S] ->
    hs [H, B, D], zs [H, B, Z], actions [H, B, A] (actions[t] taken at state t,
    hs[t]/zs[t] the state after it; time-major like the noise).
    """
    if not isinstance(H, (int, np.integer)) or H < 1:
        raise ValueError(f"H: expected a positive int, got {H!r}")
    c = _begin(w, h0, "h0", backend, precision, _resolve_classes(classes, w, u), check)
    sz = c.sizes
    h_ = c.arg(h0, "h0", (None, sz.D), "B, D")
    B = h_.shape[0]
    z_ = c.arg(z0, "z0", (B, sz.Z), "B, Z")
    check_alloc("H, B", 4 * int(H) * B * (2 * sz.A + sz.S + sz.D + sz.Z), "the noise and the imagined states")
    rng = _rng(seed) if eps is None or u is None else None
    eps_ = c.arg(_noise(rng, "eps", (H, B, sz.A)) if eps is None else eps, "eps", (H, B, sz.A), "H, B, A")
    u_ = c.uniforms(u, (H, B, sz.S), "H, B, S", rng)
    with c.no_grad():
        outs = c.impl.imagine(c.prep.state, h_, z_, eps_, u_, sz.C)
    return tuple(c.out(o) for o in outs)  # type: ignore[return-value]


def self_assess(
    w: Mapping[str, Array],
    s: Array,
    grad: bool = False,
    *,
    classes: int | None = None,
    backend: str = "auto",
    precision: str = "fp32",
    check: bool = True,
) -> Array | tuple[Array, Array]:
    """psi = sigmoid(sa(s)) [B, N] for s = [h, z] [B, D+Z]; with ``grad`` also
    d(sum_i psi_i)/ds [B, D+Z], computed analytically in the same pass.

    z is never split into groups here, so ``classes`` is not needed (when given it must divide Z)."""
    c = _begin(w, s, "s", backend, precision, classes, check)
    sz = c.sizes
    s_ = c.arg(s, "s", (None, sz.D + sz.Z), "B, D+Z")
    outs = c.impl.self_assess(c.prep.state, s_, bool(grad))
    if grad:
        return c.out(outs[0]), c.out(outs[1])
    return c.out(outs)


def self_regulate(
    w: Mapping[str, Array],
    h_t: Array,
    z_t: Array | None = None,
    H: int = 10,
    beta: float = 0.02,
    eps: Array | None = None,
    u: Array | None = None,
    *,
    seed: Any = None,
    trace: bool = False,
    classes: int | None = None,
    backend: str = "auto",
    precision: str = "fp32",
    check: bool = True,
) -> tuple[Array, ...]:
    """MUSE Algorithm 1 (paper 000) in one call.

    h_t [B, D]; z_t [B, Z] (e.g. the posterior of the current observation) or
    None to sample it from the prior of h_t with u [B, S]; eps [H+1, B, A]
    (eps[k] for iteration k, eps[H] for the returned action).
    Returns (z_t [B, Z], a_t [B, A], h_next [B, D]) and with ``trace`` also
    psi [H, B, N], psi at iteration k before its gradient step.
    """
    if not isinstance(H, (int, np.integer)) or H < 0:
        raise ValueError(f"H: expected an int >= 0, got {H!r}")
    beta = float(beta)
    if not np.isfinite(beta):
        raise ValueError(f"beta: expected a finite float, got {beta!r}")
    c = _begin(w, h_t, "h_t", backend, precision, _resolve_classes(classes, w, u), check)
    sz = c.sizes
    h_ = c.arg(h_t, "h_t", (None, sz.D), "B, D")
    B = h_.shape[0]
    check_alloc("H, B", 4 * (int(H) + 1) * B * (sz.A + sz.N), "the noise and the trace")
    rng = _rng(seed) if eps is None or (z_t is None and u is None) else None
    eps_ = c.arg(_noise(rng, "eps", (H + 1, B, sz.A)) if eps is None else eps, "eps", (H + 1, B, sz.A), "H+1, B, A")
    z_ = None if z_t is None else c.arg(z_t, "z_t", (B, sz.Z), "B, Z")
    u_ = None if z_ is not None else c.uniforms(u, (B, sz.S), "B, S", rng)
    with c.no_grad():
        outs = c.impl.self_regulate(c.prep.state, h_, z_, int(H), beta, eps_, u=u_, classes=sz.C, trace=bool(trace))
    return tuple(c.out(o) for o in outs)
