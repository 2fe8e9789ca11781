"""The RSSM functions that training differentiates, written with fused torch ops.

Same maths and same weight names as :mod:`metacog_fast.ops.rssm.naive` (docs/design.md §1.1), which
stays the readable reference; here each dense layer is one ``F.linear`` (matmul + bias in one op)
and each LayerNorm one ``F.layer_norm`` instead of the reference's mean / variance / divide, which
cuts the elementwise passes (and their backward) that dominated a training update once its matmuls
ran in bfloat16 (docs/muse_wm.md "Training speed"). Under ``torch.autocast`` the matmuls run in the
autocast dtype; the categorical logits and the actor's statistics are returned in float32.

Shapes as in naive: h [B, D], z [B, Z], a [B, A], embed [B, E], s = [h, z] [B, D+Z].
"""
from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F

from metacog_fast.ops.rssm.naive import LN_EPS, STD_MIN
from metacog_fast.ops.rssm.sizes import count_layers

Weights = Mapping[str, torch.Tensor]


def dense_block(w: Weights, name: str, x: torch.Tensor) -> torch.Tensor:
    """silu(layer_norm(linear(x))) -> [B, Hd]."""
    y = F.linear(x, w[f"{name}.w"], w[f"{name}.b"])
    return F.silu(F.layer_norm(y, y.shape[-1:], w[f"{name}.ln.g"], w[f"{name}.ln.b"], LN_EPS))


def mlp(w: Weights, prefix: str, x: torch.Tensor, layers: int) -> torch.Tensor:
    """``layers`` dense blocks then ``prefix.out``; the output in float32."""
    for i in range(layers):
        x = dense_block(w, f"{prefix}.{i}", x)
    return F.linear(x, w[f"{prefix}.out.w"], w[f"{prefix}.out.b"]).float()


def sequence_model(w: Weights, h: torch.Tensor, z: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """h' = f(h, z, a) (naive.sequence_model); h' keeps h's dtype (float32 when h is). -> [B, D]."""
    x = dense_block(w, "img_in", torch.cat([z, a], -1))
    g = F.linear(torch.cat([x, h.to(x.dtype)], -1), w["gru.w"])
    g = F.layer_norm(g, g.shape[-1:], w["gru.ln.g"], w["gru.ln.b"], LN_EPS)
    r, c, u = torch.chunk(g, 3, -1)
    c = torch.tanh(torch.sigmoid(r) * c)
    u = torch.sigmoid(u - 1.0)
    return torch.lerp(h, c.to(h.dtype), u.to(h.dtype))


def prior_logits(w: Weights, h: torch.Tensor) -> torch.Tensor:
    """Prior logits [B, Z] (float32) from h [B, D]."""
    return F.linear(dense_block(w, "img_out", h), w["img_logits.w"], w["img_logits.b"]).float()


def posterior_logits(w: Weights, h: torch.Tensor, embed: torch.Tensor) -> torch.Tensor:
    """Posterior logits [B, Z] (float32) from [h, embed]."""
    x = dense_block(w, "obs_out", torch.cat([h, embed.to(h.dtype)], -1))
    return F.linear(x, w["obs_logits.w"], w["obs_logits.b"]).float()


def actor_stats(w: Weights, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean [B, A], std [B, A]) of the actor, std = softplus(raw) + 0.1, float32."""
    mean, raw = torch.chunk(mlp(w, "actor", s, count_layers(w, "actor")), 2, -1)
    return mean, F.softplus(raw) + STD_MIN


def sa_logits(w: Weights, s: torch.Tensor) -> torch.Tensor:
    """Self-assessment logits [B, N] (float32)."""
    return mlp(w, "sa", s, count_layers(w, "sa"))
