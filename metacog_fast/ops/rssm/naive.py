"""Torch reference of the RSSM and the MUSE self-assessment / self-regulation kernels (naive.py of the op).

docs/design.md §1.1 and §1.2. Everything here is a pure function of ``w`` (a mapping
``name -> torch.Tensor`` with the docs/design.md §1.1 names, e.g. ``"gru.w"``) and of the
inputs, written for reading, not for speed. Autograd differentiates it.

Shapes (``B`` batch, ``Z = S*C``):
    h [B, D], z [B, Z] (one-hot per group of C), a [B, A], embed [B, E],
    s = [h, z] [B, D+Z], u [B, S] uniforms in [0, 1), eps [B, A] standard normals.
"""
from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F

from metacog_fast.ops.rssm.sizes import count_layers

LN_EPS = 1e-3
"""LayerNorm epsilon (DreamerV3)."""
UNIMIX = 0.01
"""Uniform mixture of the categorical: p = (1-UNIMIX)*softmax + UNIMIX/C."""
STD_MIN = 0.1
"""Actor std floor: std = softplus(raw) + STD_MIN."""

Weights = Mapping[str, torch.Tensor]


# --- building blocks ----------------------------------------------------------------


def layer_norm(x: torch.Tensor, g: torch.Tensor, b: torch.Tensor, eps: float = LN_EPS) -> torch.Tensor:
    """LayerNorm over the last axis with biased variance (as torch.nn.LayerNorm)."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * g + b


def linear(w: Weights, name: str, x: torch.Tensor) -> torch.Tensor:
    """x [B, in] @ w[name.w] [out, in]^T + w[name.b] -> [B, out]."""
    return x @ w[f"{name}.w"].T + w[f"{name}.b"]


def dense_block(w: Weights, name: str, x: torch.Tensor) -> torch.Tensor:
    """silu(ln(linear(x))) -> [B, Hd]."""
    return F.silu(layer_norm(linear(w, name, x), w[f"{name}.ln.g"], w[f"{name}.ln.b"]))


def mlp(w: Weights, prefix: str, x: torch.Tensor, layers: int) -> torch.Tensor:
    """``layers`` dense blocks prefix.0 .. prefix.{layers-1}, then prefix.out (linear)."""
    for i in range(layers):
        x = dense_block(w, f"{prefix}.{i}", x)
    return linear(w, f"{prefix}.out", x)


# --- RSSM ---------------------------------------------------------------------------


def sequence_model(w: Weights, h: torch.Tensor, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """h' = f(h, z, a): img_in block then the normalised GRU of DreamerV3. -> [B, D]."""
    x = dense_block(w, "img_in", torch.cat([z, a], -1))
    g = torch.cat([x, h], -1) @ w["gru.w"].T
    g = layer_norm(g, w["gru.ln.g"], w["gru.ln.b"])
    r, c, u = torch.chunk(g, 3, -1)
    r = torch.sigmoid(r)
    c = torch.tanh(r * c)
    u = torch.sigmoid(u - 1.0)
    return u * c + (1.0 - u) * h


def prior_logits(w: Weights, h: torch.Tensor) -> torch.Tensor:
    """Prior (dynamics predictor) logits from h [B, D] -> [B, Z]."""
    return linear(w, "img_logits", dense_block(w, "img_out", h))


def posterior_logits(w: Weights, h: torch.Tensor, embed: torch.Tensor) -> torch.Tensor:
    """Posterior (encoder) logits from [h, embed] -> [B, Z]."""
    return linear(w, "obs_logits", dense_block(w, "obs_out", torch.cat([h, embed], -1)))


def categorical_probs(logits: torch.Tensor, classes: int, unimix: float = UNIMIX) -> torch.Tensor:
    """p = (1-unimix)*softmax(logits per group) + unimix/C -> [B, S, C]."""
    lg = logits.reshape(*logits.shape[:-1], -1, classes)
    return (1.0 - unimix) * torch.softmax(lg, -1) + unimix / classes


def sample_categorical(
    logits: torch.Tensor, u: torch.Tensor, classes: int, *, straight_through: bool = False
) -> torch.Tensor:
    """One-hot sample per group by inverse CDF.

    logits [B, Z], u [B, S] -> one-hot [B, Z]. The class of a group is the
    first k with cumsum(p)[k] > u (the last class if rounding leaves none).
    ``straight_through`` adds ``p - p.detach()`` so gradients reach the logits.
    """
    p = categorical_probs(logits, classes)
    cdf = torch.cumsum(p, -1)
    k = (cdf <= u.unsqueeze(-1)).sum(-1).clamp(max=classes - 1)
    onehot = F.one_hot(k, classes).to(logits.dtype)
    if straight_through:
        onehot = onehot + p - p.detach()
    return onehot.reshape(logits.shape)


def actor_stats(w: Weights, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Actor on s [B, D+Z] -> (mean [B, A], std [B, A]), std = softplus(raw) + 0.1."""
    out = mlp(w, "actor", s, count_layers(w, "actor"))
    mean, raw = torch.chunk(out, 2, -1)
    return mean, F.softplus(raw) + STD_MIN


def actor_sample(w: Weights, s: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """a = tanh(mean + std*eps) -> [B, A]."""
    mean, std = actor_stats(w, s)
    return torch.tanh(mean + std * eps)


def img_step(
    w: Weights, h: torch.Tensor, z: torch.Tensor, a: torch.Tensor, u: torch.Tensor, classes: int = 32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Imagination step -> (h' [B, D], z' ~ prior one-hot [B, Z], prior logits [B, Z])."""
    h2 = sequence_model(w, h, z, a)
    logits = prior_logits(w, h2)
    return h2, sample_categorical(logits, u, classes), logits


def obs_step(
    w: Weights,
    h: torch.Tensor,
    z: torch.Tensor,
    a: torch.Tensor,
    embed: torch.Tensor,
    u: torch.Tensor,
    classes: int = 32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Observation step -> (h' [B, D], z' ~ posterior one-hot [B, Z], posterior logits [B, Z]).

    The prior logits of h' (for the KL losses) are ``prior_logits(w, h')``.
    """
    h2 = sequence_model(w, h, z, a)
    logits = posterior_logits(w, h2, embed)
    return h2, sample_categorical(logits, u, classes), logits


def imagine(
    w: Weights, h0: torch.Tensor, z0: torch.Tensor, eps: torch.Tensor, u: torch.Tensor, classes: int = 32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """H imagination steps driven by the actor (H = eps.shape[0]).

    eps [H, B, A], u [H, B, S] -> hs [H, B, D], zs [H, B, Z], actions [H, B, A]:
    actions[t] is sampled at state (h_t, z_t) (h_0 = h0), hs[t], zs[t] are
    the state after that action (the start state is not repeated).
    """
    h, z = h0, z0
    hs, zs, acts = [], [], []
    for t in range(eps.shape[0]):
        a = actor_sample(w, torch.cat([h, z], -1), eps[t])
        h, z, _ = img_step(w, h, z, a, u[t], classes)
        hs.append(h)
        zs.append(z)
        acts.append(a)
    return torch.stack(hs), torch.stack(zs), torch.stack(acts)


# --- self-assessment and self-regulation (MUSE, paper 000 §3.1) ------------------------


def sa_logits(w: Weights, s: torch.Tensor) -> torch.Tensor:
    """Self-assessment logits on s [B, D+Z] -> [B, N]."""
    return mlp(w, "sa", s, count_layers(w, "sa"))


def self_assess(
    w: Weights, s: torch.Tensor, grad: bool = False
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """psi = sigmoid(sa(s)) [B, N]; with ``grad`` also d(sum_i psi_i)/ds [B, D+Z] (autograd)."""
    if not grad:
        return torch.sigmoid(sa_logits(w, s))
    with torch.enable_grad():
        s_ = s.detach().requires_grad_(True)
        psi = torch.sigmoid(sa_logits(w, s_))
        (g,) = torch.autograd.grad(psi.sum(), s_)
    return psi.detach(), g


def self_regulate(
    w: Weights,
    h: torch.Tensor,
    z: torch.Tensor | None,
    H: int,
    beta: float,
    eps: torch.Tensor,
    u: torch.Tensor | None = None,
    classes: int = 32,
    trace: bool = False,
) -> tuple[torch.Tensor, ...]:
    """MUSE Algorithm 1 (paper 000) in one call.

    h [B, D]; z [B, Z] or None (then z ~ prior(h) with u [B, S]); eps [H+1, B, A]
    (eps[k] drives the actor at iteration k, eps[H] the final action).
    Returns (z_t [B, Z], a_t [B, A], h_next [B, D]) and, with ``trace``,
    psi [H, B, N]: psi at the state of iteration k before its gradient step.
    """
    D = h.shape[-1]
    if z is None:
        if u is None:
            raise ValueError("u: needed to sample z_t from the prior when z is None")
        z = sample_categorical(prior_logits(w, h), u, classes)
    z_t = z
    s = torch.cat([h, z], -1)
    psis = []
    for k in range(H):
        a = actor_sample(w, s, eps[k])                                   # line 9
        h_new = sequence_model(w, s[:, :D], s[:, D:], a)                  # line 10
        s = torch.cat([h_new, s[:, D:]], -1)
        psi, g = self_assess(w, s, grad=True)                             # line 11
        s = s + beta * g
        psis.append(psi)
    a_t = actor_sample(w, s, eps[H])                                      # line 13
    h_next = sequence_model(w, s[:, :D], s[:, D:], a_t)                   # line 14
    if trace:
        psi_tr = torch.stack(psis) if psis else h.new_zeros((0, h.shape[0], w["sa.out.w"].shape[0]))
        return z_t, a_t, h_next, psi_tr
    return z_t, a_t, h_next
