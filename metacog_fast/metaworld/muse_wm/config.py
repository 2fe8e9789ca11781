"""How the MUSE-WM agent acts (paper 000 Algorithm 1): its config, stored in a checkpoint's
``config.act`` and embedded in the training protocol's config (metacog_fast.metaworld.train.config)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ActConfig:
    """How the agent acts (paper 000 Algorithm 1)."""

    self_regulation: bool = True
    """Run ``self_regulate`` at every step (MUSE); False = act with the actor alone (Dreamer)."""
    H: int = 10
    """Self-regulation iterations."""
    beta: float = 0.02
    """Self-regulation step size on the RSSM state."""
    sr_z: str = "prior"
    """z_t for self-regulation: "prior" (Algorithm 1 line 4 as printed) or "posterior" (of the current obs)."""
    backend: str = "auto"
    """Kernel backend for acting ("auto", "cpu", "torch", ...)."""
