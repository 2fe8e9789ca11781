"""Trajectory scoring kernels: MUSE's language self-assessment M_sa (docs/design.md §1.3).

``score_trajectories(task_emb, traj_emb, head)`` = sigmoid(g_eta(concat(traj_emb, task_emb)))
fused (concat + SiLU MLP + sigmoid), and ``mean_pool_l2norm`` (MiniLM's pooling).
Backends (one dispatch table): ``"cpu"`` (:mod:`.cpu`, compiled core), ``"triton"``
(:mod:`.triton`), ``"torch"`` (:mod:`.naive`, the reference). Gradients: the torch path is
differentiated by autograd; the cpu and triton paths run the forward in the kernel and, when a
gradient is needed, their backward recomputes the forward with the reference under autograd
(rematerialisation; nothing is stored from the kernel). The head's layout and checks:
:mod:`.head`.

Fast path: ``check=False`` skips the NaN/inf scans of the inputs and the head's shape checks
(for callers whose inputs come from a model they run themselves); dtypes, ranks and the batch
are still checked.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import torch

from metacog_fast.ops._dispatch import DispatchTable
from metacog_fast.ops.scoring import naive as ref
from metacog_fast.ops.scoring.head import ArrayLike, Layers, as_float_tensor, checked_head, init_scoring_head

__all__ = ["TABLE", "init_scoring_head", "mean_pool_l2norm", "score_trajectories"]

TABLE = DispatchTable("scoring", {
    "cpu": "metacog_fast.ops.scoring.cpu",
    "triton": "metacog_fast.ops.scoring.triton",
    "torch": "metacog_fast.ops.scoring.naive",
})


class _ScoreFn(torch.autograd.Function):
    """Kernel forward; backward by recomputing the reference under autograd."""

    @staticmethod
    def forward(ctx, backend: str, task: torch.Tensor, traj: torch.Tensor, *flat: torch.Tensor) -> torch.Tensor:
        layers = [(flat[i].detach().contiguous(), flat[i + 1].detach().contiguous()) for i in range(0, len(flat), 2)]
        ctx.save_for_backward(task, traj, *flat)
        return TABLE.impl(backend).score_layers(task.detach().contiguous(), traj.detach().contiguous(), layers)

    @staticmethod
    def backward(ctx, grad_p: torch.Tensor):
        task, traj, *flat = ctx.saved_tensors
        inputs = [t.detach().requires_grad_(need) for t, need in zip([task, traj, *flat], ctx.needs_input_grad[1:])]
        with torch.enable_grad():
            layers = [(inputs[2 + i], inputs[3 + i]) for i in range(0, len(flat), 2)]
            p = ref.score_layers(inputs[0], inputs[1], layers)
            wanted = [t for t in inputs if t.requires_grad]
            grads = iter(torch.autograd.grad(p, wanted, grad_p)) if wanted else iter(())
        return (None, *[next(grads) if t.requires_grad else None for t in inputs])


def score_trajectories(task_emb: ArrayLike, traj_emb: ArrayLike, head: Mapping[str, ArrayLike],
                       backend: str = "auto", *, check: bool = True) -> ArrayLike:
    """M_sa probabilities p [B] = sigmoid(g_eta(concat(traj_emb, task_emb))).

    task_emb [B or 1, Dta] (one row is broadcast to every trajectory without
    materialising the concat), traj_emb [B, Dtr], head: l0.w [H0, Dtr+Dta], ...,
    out.w [1, H_last] (see :mod:`.head`). Returns a numpy array when traj_emb
    is one, else a tensor (differentiable on every backend).
    """
    as_numpy = isinstance(traj_emb, np.ndarray)
    traj = as_float_tensor(traj_emb, "traj_emb", 2, check)
    task = as_float_tensor(task_emb, "task_emb", 2, check)
    B = traj.shape[0]
    if task.shape[0] not in (1, B):
        raise ValueError(f"task_emb: expected 1 or {B} rows (traj_emb has {B}), got shape {list(task.shape)}")
    if traj.device != task.device:
        raise ValueError(f"task_emb: expected the device of traj_emb ({traj.device}), got {task.device}")
    layers: Layers = checked_head(head, traj.shape[1] + task.shape[1]) if check else [
        (as_float_tensor(w, "head", 2, False), as_float_tensor(b, "head", 1, False)) for w, b in ref.head_layers(head)]
    layers = [(w.to(traj.device), b.to(traj.device)) for w, b in layers]
    be = TABLE.resolve(backend, on_gpu=traj.is_cuda)
    if be == "cpu" and traj.is_cuda:
        raise ValueError("traj_emb: backend='cpu' needs CPU tensors, got CUDA tensors")
    if B == 0:
        p = traj.new_zeros((0,))
    elif be == "torch":  # the reference itself: autograd differentiates it
        p = ref.score_layers(task, traj, layers)
    else:
        p = _ScoreFn.apply(be, task, traj, *[t for wb in layers for t in wb])
    return p.detach().numpy() if as_numpy else p


def mean_pool_l2norm(token_emb: ArrayLike, mask: ArrayLike, backend: str = "auto",
                     check_finite: bool = True, *, check: bool = True) -> ArrayLike:
    """Fused masked mean pooling + L2 normalisation: token_emb [B, T, D], mask [B, T] -> [B, D].

    ``mask`` may be integer/bool (a tokenizer's attention mask) or float. Rows
    whose mask is all zero give zeros (the mask sum is clamped to 1e-9 and the
    norm to 1e-12, as sentence-transformers does). Returns numpy for numpy input.
    ``check=False`` (or the older ``check_finite=False``) skips the NaN/inf scans, for callers
    whose inputs come from a model they run themselves (the encoder); shapes and dtypes are
    still checked.
    """
    finite = bool(check and check_finite)
    as_numpy = isinstance(token_emb, np.ndarray)
    x = as_float_tensor(token_emb, "token_emb", 3, finite)
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
    if finite and not bool(torch.isfinite(m).all()):
        raise ValueError("mask: contains NaN or infinite values")
    be = TABLE.resolve(backend, on_gpu=x.is_cuda)
    if be == "cpu" and x.is_cuda:
        raise ValueError("token_emb: backend='cpu' needs CPU tensors, got CUDA tensors")
    # The fused paths are for inference; gradients go through the reference.
    impl = TABLE.impl("torch" if x.requires_grad else be)
    y = impl.mean_pool_l2norm(x if x.requires_grad else x.detach().contiguous(), m.contiguous())
    return y.detach().numpy() if as_numpy else y
