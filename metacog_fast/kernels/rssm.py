"""RSSM and MUSE self-assessment / self-regulation kernels: public API and backend dispatch.

docs/design.md §1.1, §1.2; docs/kernels.md has the full contract. Backends:
``"torch"`` (the readable reference, metacog_fast.kernels.reference.rssm),
``"cpu"`` (compiled core, fp32 or ``precision="bf16"`` weights),
``"cuda"`` / ``"triton"`` (metacog_fast.kernels.rssm_cuda / rssm_triton).

Inputs are numpy arrays or torch tensors (float32; other float dtypes and
non-contiguous layouts are converted); the outputs have the type (and device)
of the state argument. Noise: ``u`` uniforms for the categorical samples and
``eps`` standard normals for the actor; when missing they are drawn in Python
from ``numpy.random.default_rng(seed)`` (``eps`` first, then ``u``) so that
every backend sees identical noise.
"""
from __future__ import annotations

import collections
import importlib
import threading
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from metacog_fast._backend import BackendUnavailable, core, resolve_backend

Array = Any  # numpy.ndarray | torch.Tensor

PRESETS: dict[str, dict[str, int]] = {"XS": {"D": 256, "Hd": 256}, "S": {"D": 512, "Hd": 512}}
"""docs/design.md presets (both with S=32 groups x C=32 classes)."""
DEFAULT_CLASSES = 32
META_WORLD_ACTION = 4
"""Meta-World action size (4-d in [-1, 1]): default A."""
PRECISIONS = ("fp32", "bf16")


# --- weights ------------------------------------------------------------------------


def _layer_names(prefix: str, L: int) -> list[str]:
    return [f"{prefix}.{i}" for i in range(L)]


def init_rssm_weights(
    preset: str | None = "XS",
    *,
    D: int | None = None,
    Hd: int | None = None,
    S: int = 32,
    C: int = 32,
    A: int = META_WORLD_ACTION,
    E: int | None = None,
    L: int = 2,
    N: int = 5,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Fresh RSSM + actor + self-assessment weights with the docs/design.md §1.1 names.

    ``preset`` "XS" (D=Hd=256) or "S" (D=Hd=512) sets D and Hd unless given;
    ``preset=None`` needs both. ``E`` (embedding size) defaults to Hd: the
    width of the MLP encoder of Meta-World's state observation. Dense weights
    are Xavier-uniform, biases 0, LayerNorm gains 1 and biases 0. Returns
    float32 C-contiguous arrays.
    """
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"preset: expected one of {sorted(PRESETS)} or None, got {preset!r}")
        D = PRESETS[preset]["D"] if D is None else D
        Hd = PRESETS[preset]["Hd"] if Hd is None else Hd
    if D is None or Hd is None:
        raise ValueError("D, Hd: both are required when preset is None")
    E = Hd if E is None else E
    for name, v in (("D", D), ("Hd", Hd), ("S", S), ("C", C), ("A", A), ("E", E), ("L", L), ("N", N)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    Z = S * C
    rng = np.random.default_rng(seed)
    w: dict[str, np.ndarray] = {}

    def dense(name: str, out: int, inp: int, bias: bool = True, ln: bool = True) -> None:
        lim = np.sqrt(6.0 / (inp + out))
        w[f"{name}.w"] = rng.uniform(-lim, lim, size=(out, inp)).astype(np.float32)
        if bias:
            w[f"{name}.b"] = np.zeros(out, np.float32)
        if ln:
            w[f"{name}.ln.g"] = np.ones(out, np.float32)
            w[f"{name}.ln.b"] = np.zeros(out, np.float32)

    dense("img_in", Hd, Z + A)
    dense("gru", 3 * D, Hd + D, bias=False)
    dense("img_out", Hd, D)
    dense("img_logits", Z, Hd, ln=False)
    dense("obs_out", Hd, D + E)
    dense("obs_logits", Z, Hd, ln=False)
    for prefix, n_out in (("actor", 2 * A), ("sa", N)):
        for i, name in enumerate(_layer_names(prefix, L)):
            dense(name, Hd, D + Z if i == 0 else Hd)
        dense(f"{prefix}.out", n_out, Hd, ln=False)
    return w


@dataclass(frozen=True)
class Sizes:
    """RSSM sizes inferred from the weight shapes."""

    D: int
    """Deterministic state size (gru.w rows / 3)."""
    Hd: int
    """Hidden width (img_in.w rows)."""
    S: int
    """Categorical groups (Z / C)."""
    C: int
    """Classes per group (``classes=``, default 32, or the last axis of ``u``)."""
    A: int
    """Action size (actor.out.w rows / 2)."""
    E: int
    """Embedding size (obs_out.w columns - D)."""
    L_actor: int
    """Hidden layers of the actor."""
    L_sa: int
    """Hidden layers of the self-assessment MLP."""
    N: int
    """Self-assessment outputs (sa.out.w rows)."""

    @property
    def Z(self) -> int:
        return self.S * self.C


def _shape(w: Mapping[str, Any], key: str) -> tuple[int, ...]:
    if key not in w:
        raise ValueError(f"weights: missing key {key!r}")
    return tuple(int(d) for d in w[key].shape)


def _expect(w: Mapping[str, Any], key: str, shape: tuple[int, ...]) -> None:
    got = _shape(w, key)
    if got != shape:
        raise ValueError(f"weights[{key!r}]: expected shape {list(shape)}, got {list(got)}")


def _count(w: Mapping[str, Any], prefix: str) -> int:
    n = 0
    while f"{prefix}.{n}.w" in w:
        n += 1
    return n


def infer_sizes(w: Mapping[str, Any], classes: int = DEFAULT_CLASSES) -> Sizes:
    """Infer and cross-check every size; ValueError naming the first inconsistent key."""
    if not isinstance(w, Mapping):
        raise TypeError(f"w: expected a mapping name -> array, got {type(w).__name__}")
    g = _shape(w, "gru.w")
    if len(g) != 2 or g[0] % 3:
        raise ValueError(f"weights['gru.w']: expected shape [3*D, Hd+D], got {list(g)}")
    D = g[0] // 3
    ii = _shape(w, "img_in.w")
    if len(ii) != 2:
        raise ValueError(f"weights['img_in.w']: expected shape [Hd, Z+A], got {list(ii)}")
    Hd = ii[0]
    lg = _shape(w, "img_logits.w")
    if len(lg) != 2:
        raise ValueError(f"weights['img_logits.w']: expected shape [Z, Hd], got {list(lg)}")
    Z = lg[0]
    if not isinstance(classes, (int, np.integer)) or classes < 1 or Z % classes:
        raise ValueError(
            f"classes: Z = {Z} (img_logits.w rows) must be a multiple of classes, got classes={classes!r}; "
            "pass classes=C for your stochastic layout"
        )
    ao = _shape(w, "actor.out.w")
    if len(ao) != 2 or ao[0] % 2:
        raise ValueError(f"weights['actor.out.w']: expected shape [2*A, Hd], got {list(ao)}")
    A = ao[0] // 2
    oo = _shape(w, "obs_out.w")
    if len(oo) != 2 or oo[1] <= D:
        raise ValueError(f"weights['obs_out.w']: expected shape [Hd, D+E] with D={D}, got {list(oo)}")
    E = oo[1] - D
    N = _shape(w, "sa.out.w")[0]
    La, Ls = _count(w, "actor"), _count(w, "sa")
    if La < 1 or Ls < 1:
        raise ValueError("weights: expected at least one hidden layer 'actor.0.w' and 'sa.0.w'")
    sz = Sizes(D=D, Hd=Hd, S=Z // classes, C=int(classes), A=A, E=E, L_actor=La, L_sa=Ls, N=N)

    def block(name: str, inp: int, bias: bool = True) -> None:
        _expect(w, f"{name}.w", (Hd if name != "gru" else 3 * D, inp))
        n = Hd if name != "gru" else 3 * D
        if bias:
            _expect(w, f"{name}.b", (n,))
        _expect(w, f"{name}.ln.g", (n,))
        _expect(w, f"{name}.ln.b", (n,))

    block("img_in", Z + A)
    block("gru", Hd + D, bias=False)
    block("img_out", D)
    _expect(w, "img_logits.w", (Z, Hd))
    _expect(w, "img_logits.b", (Z,))
    block("obs_out", D + E)
    _expect(w, "obs_logits.w", (Z, Hd))
    _expect(w, "obs_logits.b", (Z,))
    for prefix, L, n_out in (("actor", La, 2 * A), ("sa", Ls, N)):
        for i in range(L):
            block(f"{prefix}.{i}", D + Z if i == 0 else Hd)
        _expect(w, f"{prefix}.out.w", (n_out, Hd))
        _expect(w, f"{prefix}.out.b", (n_out,))
    return sz


def weight_names(sz: Sizes) -> list[str]:
    """Every key an RSSM weights mapping of these sizes holds."""
    names = ["img_in.w", "img_in.b", "img_in.ln.g", "img_in.ln.b", "gru.w", "gru.ln.g", "gru.ln.b"]
    for n in ("img_out", "obs_out"):
        names += [f"{n}.w", f"{n}.b", f"{n}.ln.g", f"{n}.ln.b"]
    names += ["img_logits.w", "img_logits.b", "obs_logits.w", "obs_logits.b"]
    for prefix, L in (("actor", sz.L_actor), ("sa", sz.L_sa)):
        for i in range(L):
            names += [f"{prefix}.{i}.{k}" for k in ("w", "b", "ln.g", "ln.b")]
        names += [f"{prefix}.out.w", f"{prefix}.out.b"]
    return names


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
    """Validated weights converted for one backend, plus the compiled object for cpu."""

    def __init__(self, w: Mapping[str, Any], sz: Sizes, backend: str, precision: str, device: Any) -> None:
        self.sizes = sz
        self.backend = backend
        self.precision = precision
        self.fingerprint = _fingerprint(w)
        self.keep = list(w.values())  # keeps ids in the fingerprint from being reused
        names = weight_names(sz)
        if backend == "cpu":
            arrays = {k: _to_numpy(w[k], f"weights[{k!r}]") for k in names}
            for k, v in arrays.items():
                _check_finite(v, f"weights[{k!r}]")
            self.obj = core().RssmCpu(arrays, sz.S, sz.C, precision == "bf16")
            self.tw = None
        else:
            self.obj = None
            self.tw = {k: _to_torch(w[k], f"weights[{k!r}]", device) for k in names}
            for k, v in self.tw.items():
                _check_finite(v, f"weights[{k!r}]")


def _fingerprint(w: Mapping[str, Any]) -> tuple:
    return tuple((k, id(v), getattr(v, "_version", None)) for k, v in w.items())


_CACHE: "collections.OrderedDict[tuple, _Prepared]" = collections.OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 8


def clear_cache() -> None:
    """Forget every prepared weights mapping (call after modifying numpy weights in place)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def _prepare(w: Mapping[str, Any], classes: int, backend: str, precision: str, device: Any) -> _Prepared:
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


# --- dispatch helpers -------------------------------------------------------------------


@dataclass
class _Call:
    """One resolved call: backend, prepared weights, output conversion."""

    backend: str
    prep: _Prepared
    as_torch: bool
    device: Any

    @property
    def sizes(self) -> Sizes:
        return self.prep.sizes

    def arg(self, x: Any, name: str, shape: tuple[int | None, ...], what: str, finite: bool = True) -> Any:
        """Convert an input for this backend and check its shape (and NaN)."""
        if self.backend == "cpu":
            y = _to_numpy(x, name)
        else:
            y = _to_torch(x, name, self.device)
        _check_shape(y, name, shape, what)
        if finite:
            _check_finite(y, name)
        return y

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
        Z = _shape(w, "img_logits.w")[0]
        S = int(u.shape[-1])
        if Z % S:
            raise ValueError(f"u: last axis S={S} must divide Z={Z} (img_logits.w rows)")
        return Z // S
    return DEFAULT_CLASSES


def _begin(
    w: Mapping[str, Any], ref: Any, ref_name: str, backend: str, precision: str, classes: int
) -> _Call:
    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    if not (_is_torch(ref) or isinstance(ref, np.ndarray)):
        raise TypeError(f"{ref_name}: expected a numpy array or torch tensor, got {type(ref).__name__}")
    as_torch = _is_torch(ref)
    on_gpu = as_torch and ref.device.type == "cuda"
    be = resolve_backend(backend, on_gpu=on_gpu, has=_available())
    if precision == "bf16" and be != "cpu":
        raise ValueError(f"precision='bf16' is a cpu-backend option; backend resolved to {be!r}")
    if be == "cpu":
        device = "cpu"
    elif be in ("cuda", "triton"):
        # triton on CPU tensors runs under TRITON_INTERPRET=1; numpy inputs go to the GPU when there is one
        torch = _torch()
        device = ref.device if as_torch else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = ref.device if as_torch else "cpu"
    prep = _prepare(w, classes, be, precision, device)
    return _Call(be, prep, as_torch, device if as_torch else "cpu")


def _available() -> tuple[str, ...]:
    """Backends this kernel implements in this build (cpu only when the core has RssmCpu)."""
    try:
        has_cpu = hasattr(core(), "RssmCpu")
    except BackendUnavailable:
        has_cpu = True  # resolve_backend then reports the missing core itself
    return ("torch", "cpu", "cuda", "triton") if has_cpu else ("torch", "cuda", "triton")


def _gpu_fn(backend: str, name: str) -> Callable[..., Any]:
    modname = "metacog_fast.kernels.rssm_cuda" if backend == "cuda" else "metacog_fast.kernels.rssm_triton"
    try:
        mod = importlib.import_module(modname)
    except ImportError as exc:
        raise BackendUnavailable(f"backend={backend!r}: cannot import {modname}: {exc}") from exc
    fn = getattr(mod, name, None)
    if fn is None:
        raise BackendUnavailable(f"backend={backend!r}: {modname} has no function {name!r}")
    return fn


def _rng(seed: Any) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _noise(rng: np.random.Generator, kind: str, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "eps":
        return rng.standard_normal(shape, dtype=np.float32)
    return rng.random(shape, dtype=np.float32)


def _ref():
    from metacog_fast.kernels.reference import rssm as ref

    return ref


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
) -> tuple[Array, Array, Array]:
    """One imagination step: h [B, D], z [B, Z], a [B, A], u [B, S] ->
    (h' [B, D], z' one-hot prior sample [B, Z], prior logits [B, Z])."""
    c = _begin(w, h, "h", backend, precision, _resolve_classes(classes, w, u))
    sz = c.sizes
    h_ = c.arg(h, "h", (None, sz.D), "B, D")
    B = h_.shape[0]
    z_ = c.arg(z, "z", (B, sz.Z), "B, Z")
    a_ = c.arg(a, "a", (B, sz.A), "B, A")
    u_ = c.arg(_noise(_rng(seed), "u", (B, sz.S)) if u is None else u, "u", (B, sz.S), "B, S")
    _check_u(u_, "u")
    if c.backend == "cpu":
        outs = c.prep.obj.img_step(h_, z_, a_, u_)
    elif c.backend == "torch":
        outs = _ref().img_step(c.prep.tw, h_, z_, a_, u_, sz.C)
    else:
        outs = _gpu_fn(c.backend, "img_step")(c.prep.tw, h_, z_, a_, u_)
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
) -> tuple[Array, Array, Array]:
    """One observation step: h [B, D], z [B, Z], a [B, A], embed [B, E], u [B, S] ->
    (h' [B, D], z' one-hot posterior sample [B, Z], posterior logits [B, Z])."""
    c = _begin(w, h, "h", backend, precision, _resolve_classes(classes, w, u))
    sz = c.sizes
    h_ = c.arg(h, "h", (None, sz.D), "B, D")
    B = h_.shape[0]
    z_ = c.arg(z, "z", (B, sz.Z), "B, Z")
    a_ = c.arg(a, "a", (B, sz.A), "B, A")
    e_ = c.arg(embed, "embed", (B, sz.E), "B, E")
    u_ = c.arg(_noise(_rng(seed), "u", (B, sz.S)) if u is None else u, "u", (B, sz.S), "B, S")
    _check_u(u_, "u")
    if c.backend == "cpu":
        outs = c.prep.obj.obs_step(h_, z_, a_, e_, u_)
    elif c.backend == "torch":
        outs = _ref().obs_step(c.prep.tw, h_, z_, a_, e_, u_, sz.C)
    else:
        outs = _gpu_fn(c.backend, "obs_step")(c.prep.tw, h_, z_, a_, e_, u_)
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
) -> tuple[Array, Array, Array]:
    """H actor-driven imagination steps in one call.

    h0 [B, D], z0 [B, Z], eps [H, B, A], u [H, B, S] ->
    hs [H, B, D], zs [H, B, Z], actions [H, B, A] (actions[t] taken at state t,
    hs[t]/zs[t] the state after it; time-major like the noise).
    """
    if not isinstance(H, (int, np.integer)) or H < 1:
        raise ValueError(f"H: expected a positive int, got {H!r}")
    c = _begin(w, h0, "h0", backend, precision, _resolve_classes(classes, w, u))
    sz = c.sizes
    h_ = c.arg(h0, "h0", (None, sz.D), "B, D")
    B = h_.shape[0]
    z_ = c.arg(z0, "z0", (B, sz.Z), "B, Z")
    rng = _rng(seed) if eps is None or u is None else None
    eps_ = c.arg(_noise(rng, "eps", (H, B, sz.A)) if eps is None else eps, "eps", (H, B, sz.A), "H, B, A")
    u_ = c.arg(_noise(rng, "u", (H, B, sz.S)) if u is None else u, "u", (H, B, sz.S), "H, B, S")
    _check_u(u_, "u")
    if c.backend == "cpu":
        outs = c.prep.obj.imagine(h_, z_, eps_, u_)
    elif c.backend == "torch":
        with _torch().no_grad():
            outs = _ref().imagine(c.prep.tw, h_, z_, eps_, u_, sz.C)
    else:
        outs = _gpu_fn(c.backend, "imagine")(c.prep.tw, h_, z_, eps_, u_)
    return tuple(c.out(o) for o in outs)  # type: ignore[return-value]


def self_assess(
    w: Mapping[str, Array],
    s: Array,
    grad: bool = False,
    *,
    classes: int | None = None,
    backend: str = "auto",
    precision: str = "fp32",
) -> Array | tuple[Array, Array]:
    """psi = sigmoid(sa(s)) [B, N] for s = [h, z] [B, D+Z]; with ``grad`` also
    d(sum_i psi_i)/ds [B, D+Z], computed analytically in the same pass."""
    c = _begin(w, s, "s", backend, precision, _resolve_classes(classes, w, None))
    sz = c.sizes
    s_ = c.arg(s, "s", (None, sz.D + sz.Z), "B, D+Z")
    if c.backend == "cpu":
        outs = c.prep.obj.self_assess(s_, bool(grad))
    elif c.backend == "torch":
        outs = _ref().self_assess(c.prep.tw, s_, grad=bool(grad))
    else:
        outs = _gpu_fn(c.backend, "self_assess")(c.prep.tw, s_, bool(grad))
    if grad:
        return c.out(outs[0]), c.out(outs[1])
    return c.out(outs[0] if isinstance(outs, tuple) else outs)


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
    c = _begin(w, h_t, "h_t", backend, precision, _resolve_classes(classes, w, u))
    sz = c.sizes
    h_ = c.arg(h_t, "h_t", (None, sz.D), "B, D")
    B = h_.shape[0]
    rng = _rng(seed) if eps is None or (z_t is None and u is None) else None
    eps_ = c.arg(_noise(rng, "eps", (H + 1, B, sz.A)) if eps is None else eps, "eps", (H + 1, B, sz.A), "H+1, B, A")
    z_ = None if z_t is None else c.arg(z_t, "z_t", (B, sz.Z), "B, Z")
    u_ = None
    if z_ is None:
        u_ = c.arg(_noise(rng, "u", (B, sz.S)) if u is None else u, "u", (B, sz.S), "B, S")
        _check_u(u_, "u")
    if c.backend == "cpu":
        zt, at, hn, tr = c.prep.obj.self_regulate(h_, z_, int(H), beta, eps_, u_, bool(trace))
        outs = (zt, at, hn, tr) if trace else (zt, at, hn)
    elif c.backend == "torch":
        with _torch().no_grad():
            outs = _ref().self_regulate(c.prep.tw, h_, z_, int(H), beta, eps_, u_, sz.C, bool(trace))
    else:
        if z_ is None:
            ref = _ref()
            z_ = ref.sample_categorical(ref.prior_logits(c.prep.tw, h_), u_, sz.C)
            outs = _gpu_fn(c.backend, "self_regulate")(c.prep.tw, h_, z_, int(H), beta, eps_, bool(trace))
        else:
            outs = _gpu_fn(c.backend, "self_regulate")(c.prep.tw, h_, z_, int(H), beta, eps_, bool(trace))
    return tuple(c.out(o) for o in outs)
