"""Trajectory scoring kernels: MUSE's language self-assessment M_sa (docs/design.md §1.3).

``score_trajectories(task_emb, traj_emb, head)`` = sigmoid(g_eta(concat(traj_emb, task_emb)))
fused (concat + SiLU MLP + sigmoid), and ``mean_pool_l2norm`` (MiniLM's pooling).
Backends: ``"cpu"`` (compiled core), ``"triton"``, ``"torch"`` (the reference in
:mod:`metacog_fast.kernels.reference.scoring`). Gradients: the torch path is
differentiated by autograd; the cpu and triton paths run the forward in the
kernel and, when a gradient is needed, their backward recomputes the forward with
the reference under autograd (rematerialisation; nothing is stored from the kernel).

Head names (see :func:`init_scoring_head`)::

    l0.w [256, 768] l0.b [256]  l1.w [64, 256] l1.b [64]  out.w [1, 64] out.b [1]
"""
from __future__ import annotations

import collections

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from metacog_fast._backend import core, resolve_backend
from metacog_fast.kernels.reference import scoring as ref

ArrayLike = Any  # torch.Tensor | np.ndarray

_HAS = ("cpu", "triton", "torch")


def init_scoring_head(in_dim: int = 768, hidden: Sequence[int] = (256, 64), seed: int = 0) -> dict[str, torch.Tensor]:
    """A fresh head g_eta: ``in_dim -> hidden[0] -> ... -> 1``.

    Weights and biases drawn like ``torch.nn.Linear`` (U(-1/sqrt(fan_in), 1/sqrt(fan_in)))
    from a generator seeded with ``seed``. Returns ``{"l0.w", "l0.b", ..., "out.w", "out.b"}``
    as float32 tensors.
    """
    if int(in_dim) < 1:
        raise ValueError(f"in_dim: expected a positive size, got {in_dim}")
    if any(int(h) < 1 for h in hidden):
        raise ValueError(f"hidden: expected positive layer sizes, got {tuple(hidden)}")
    g = torch.Generator().manual_seed(int(seed))
    head: dict[str, torch.Tensor] = {}
    fan_in = int(in_dim)
    names = [f"l{k}" for k in range(len(hidden))] + ["out"]
    for name, out in zip(names, [*hidden, 1]):
        bound = 1.0 / float(np.sqrt(fan_in))
        head[f"{name}.w"] = (torch.rand(int(out), fan_in, generator=g) * 2 - 1) * bound
        head[f"{name}.b"] = (torch.rand(int(out), generator=g) * 2 - 1) * bound
        fan_in = int(out)
    return head


def _as_float_tensor(x: ArrayLike, name: str, ndim: int, check_finite: bool = True) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        if not (np.issubdtype(x.dtype, np.floating)):
            raise TypeError(f"{name}: expected a floating array (float32), got dtype {x.dtype}")
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    elif isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise TypeError(f"{name}: expected a floating tensor (float32), got dtype {x.dtype}")
        t = x.to(torch.float32)
    else:
        raise TypeError(f"{name}: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {list(t.shape)}")
    if check_finite and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return t


def _check_head(head: Mapping[str, ArrayLike], in_dim: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if not isinstance(head, Mapping):
        raise TypeError(f"head: expected a mapping name -> array, got {type(head).__name__}")
    for key in ("out.w", "out.b"):
        if key not in head:
            raise ValueError(f"head: missing {key!r} (expected l0.w, l0.b, ..., out.w, out.b)")
    layers = []
    k = 0
    prev = in_dim
    while True:
        name = f"l{k}" if f"l{k}.w" in head else "out"
        if f"{name}.b" not in head:
            raise ValueError(f"head: missing {name + '.b'!r}")
        w = _as_float_tensor(head[f"{name}.w"], f"head[{name + '.w'!r}]", 2)
        b = _as_float_tensor(head[f"{name}.b"], f"head[{name + '.b'!r}]", 1)
        if w.shape[1] != prev:
            raise ValueError(f"head[{name + '.w'!r}]: expected {prev} input columns, got shape {list(w.shape)}")
        if b.shape[0] != w.shape[0]:
            raise ValueError(f"head[{name + '.b'!r}]: expected shape [{w.shape[0]}], got {list(b.shape)}")
        layers.append((w, b))
        prev = w.shape[0]
        if name == "out":
            break
        k += 1
    if layers[-1][0].shape[0] != 1:
        raise ValueError(f"head['out.w']: expected 1 output row, got shape {list(layers[-1][0].shape)}")
    return layers


_HEAD_CACHE: "collections.OrderedDict[tuple, list[tuple[torch.Tensor, torch.Tensor]]]" = collections.OrderedDict()
_HEAD_CACHE_SIZE = 8


def _array_key(v: Any) -> tuple | None:
    # torch tensors carry a version counter bumped by every in-place write (an optimizer
    # step), so an updated head is validated again; numpy arrays are keyed by buffer.
    if isinstance(v, torch.Tensor):
        return (id(v), v.data_ptr(), v._version)
    if isinstance(v, np.ndarray) and v.dtype == np.float32 and v.flags.c_contiguous:
        return (id(v), v.__array_interface__["data"][0])
    return None  # converted by copy: a cached copy could go stale, so never cache it


def _checked_head(head: Mapping[str, ArrayLike], in_dim: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``_check_head`` memoised per head object: the shape and NaN checks of the weights
    cost ~10x the fused kernel at small batch, and a head is reused for many calls.
    (A numpy head written in place with NaN after its first use is not re-checked.)"""
    if not isinstance(head, Mapping):
        return _check_head(head, in_dim)
    parts = tuple((k, _array_key(v)) for k, v in head.items())
    if any(a is None for _, a in parts):
        return _check_head(head, in_dim)
    key = (id(head), in_dim, parts)
    layers = _HEAD_CACHE.get(key)
    if layers is None:
        layers = _check_head(head, in_dim)
        _HEAD_CACHE[key] = layers
        while len(_HEAD_CACHE) > _HEAD_CACHE_SIZE:
            _HEAD_CACHE.popitem(last=False)
    else:
        _HEAD_CACHE.move_to_end(key)
    return layers


def _head_dict(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    names = [f"l{k}" for k in range(len(layers) - 1)] + ["out"]
    out: dict[str, torch.Tensor] = {}
    for n, (w, b) in zip(names, layers):
        out[f"{n}.w"], out[f"{n}.b"] = w, b
    return out


def _forward_cpu(task: torch.Tensor, traj: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    def np32(t: torch.Tensor) -> np.ndarray:
        return t.detach().contiguous().numpy()

    p = core().score_trajectories(np32(task), np32(traj), [np32(w) for w, _ in layers], [np32(b) for _, b in layers])
    return torch.from_numpy(p)


def _forward_triton(task: torch.Tensor, traj: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    from metacog_fast.kernels.scoring_triton import score_trajectories_triton

    return score_trajectories_triton(task.detach().contiguous(), traj.detach().contiguous(),
                                     [(w.detach().contiguous(), b.detach().contiguous()) for w, b in layers])


class _ScoreFn(torch.autograd.Function):
    """Kernel forward; backward by recomputing the reference under autograd."""

    @staticmethod
    def forward(ctx, backend: str, task: torch.Tensor, traj: torch.Tensor, *flat: torch.Tensor) -> torch.Tensor:
        layers = [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        ctx.save_for_backward(task, traj, *flat)
        fwd = _forward_cpu if backend == "cpu" else _forward_triton
        return fwd(task, traj, layers)

    @staticmethod
    def backward(ctx, grad_p: torch.Tensor):
        task, traj, *flat = ctx.saved_tensors
        inputs = [t.detach().requires_grad_(need) for t, need in zip([task, traj, *flat], ctx.needs_input_grad[1:])]
        with torch.enable_grad():
            layers = [(inputs[2 + i], inputs[3 + i]) for i in range(0, len(flat), 2)]
            p = ref.score_trajectories(inputs[0], inputs[1], _head_dict(layers))
            wanted = [t for t in inputs if t.requires_grad]
            grads = iter(torch.autograd.grad(p, wanted, grad_p)) if wanted else iter(())
        return (None, *[next(grads) if t.requires_grad else None for t in inputs])


def score_trajectories(task_emb: ArrayLike, traj_emb: ArrayLike, head: Mapping[str, ArrayLike],
                       backend: str = "auto") -> ArrayLike:
    """M_sa probabilities p [B] = sigmoid(g_eta(concat(traj_emb, task_emb))).

    task_emb [B or 1, Dta] (one row is broadcast to every trajectory without
    materialising the concat), traj_emb [B, Dtr], head: l0.w [H0, Dtr+Dta], ...,
    out.w [1, H_last] (see module docstring). Returns a numpy array when traj_emb
    is one, else a tensor (differentiable on every backend).
    """
    as_numpy = isinstance(traj_emb, np.ndarray)
    traj = _as_float_tensor(traj_emb, "traj_emb", 2)
    task = _as_float_tensor(task_emb, "task_emb", 2)
    B = traj.shape[0]
    if task.shape[0] not in (1, B):
        raise ValueError(f"task_emb: expected 1 or {B} rows (traj_emb has {B}), got shape {list(task.shape)}")
    if traj.device != task.device:
        raise ValueError(f"task_emb: expected the device of traj_emb ({traj.device}), got {task.device}")
    layers = _checked_head(head, traj.shape[1] + task.shape[1])
    layers = [(w.to(traj.device), b.to(traj.device)) for w, b in layers]
    be = resolve_backend(backend, on_gpu=traj.is_cuda, has=_HAS)
    if be == "cpu" and traj.is_cuda:
        raise ValueError("traj_emb: backend='cpu' needs CPU tensors, got CUDA tensors")
    if B == 0:
        p = traj.new_zeros((0,))
    elif be == "torch":
        p = ref.score_trajectories(task, traj, _head_dict(layers))
    else:
        flat = [t for wb in layers for t in wb]
        p = _ScoreFn.apply(be, task, traj, *flat)
    return p.detach().numpy() if as_numpy else p


def mean_pool_l2norm(token_emb: ArrayLike, mask: ArrayLike, backend: str = "auto",
                     check_finite: bool = True) -> ArrayLike:
    """Fused masked mean pooling + L2 normalisation: token_emb [B, T, D], mask [B, T] -> [B, D].

    ``mask`` may be integer/bool (a tokenizer's attention mask) or float. Rows
    whose mask is all zero give zeros (the mask sum is clamped to 1e-9 and the
    norm to 1e-12, as sentence-transformers does). Returns numpy for numpy input.
    ``check_finite=False`` skips the NaN/inf scans (for callers whose inputs come from
    a model they run themselves, e.g. the encoder; shapes and dtypes are still checked).
    """
    as_numpy = isinstance(token_emb, np.ndarray)
    x = _as_float_tensor(token_emb, "token_emb", 3, check_finite)
    if isinstance(mask, np.ndarray):
        m = torch.from_numpy(np.ascontiguousarray(mask))
    elif isinstance(mask, torch.Tensor):
        m = mask
    else:
        raise TypeError(f"mask: expected a torch.Tensor or numpy.ndarray, got {type(mask).__name__}")
    if m.dtype.is_complex:
        raise TypeError(f"mask: expected a real or bool dtype, got {m.dtype}")
    m = m.to(device=x.device, dtype=torch.float32)
    if tuple(m.shape) != tuple(x.shape[:2]):
        raise ValueError(f"mask: expected shape {list(x.shape[:2])} (token_emb's [B, T]), got {list(m.shape)}")
    if check_finite and not bool(torch.isfinite(m).all()):
        raise ValueError("mask: contains NaN or infinite values")
    be = resolve_backend(backend, on_gpu=x.is_cuda, has=_HAS)
    if be == "cpu" and x.is_cuda:
        raise ValueError("token_emb: backend='cpu' needs CPU tensors, got CUDA tensors")
    if be == "torch" or x.requires_grad:
        # The fused paths are for inference; gradients go through the reference.
        y = ref.mean_pool_l2norm(x, m)
    elif be == "cpu":
        y = torch.from_numpy(core().mean_pool_l2norm(x.detach().contiguous().numpy(), m.contiguous().numpy()))
    else:
        from metacog_fast.kernels.scoring_triton import mean_pool_l2norm_triton

        y = mean_pool_l2norm_triton(x.detach().contiguous(), m.contiguous())
    return y.detach().numpy() if as_numpy else y
