"""Evaluation episodes of a learning run: the actor's mean action (no exploration noise, no
training), on fresh layouts, scored two ways (Meta-World's "success at any step" and TD-MPC2's
"success at the last step", the definition of the published curves)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from metacog_fast.envs.driver import play
from metacog_fast.metaworld.muse_wm import MuseWMAgent
from metacog_fast.metrics import wilson_interval

__all__ = ["EvalEpisode", "eval_episode", "evaluation_record"]


@dataclass
class EvalEpisode:
    """Outcome of one evaluation episode."""

    reset_seed: int
    """Layout seed of the episode."""
    ret: float
    """Sum of the env rewards."""
    success: bool
    """``info["success"]`` at any step (Meta-World's success)."""
    final_success: bool
    """``info["success"]`` at the last step (how TD-MPC2 scores its evaluation episodes)."""
    t_success: int
    """First 1-based step with success, -1 if none."""
    steps: int
    """Env steps of the episode."""


def eval_episode(env: Any, agent: MuseWMAgent, T_max: int, reset_seed: int) -> EvalEpisode:
    """One episode acting with the actor's mean (``eps`` = 0; the latents are still sampled)."""
    obs, info = env.reset(seed=reset_seed)
    agent.reset()
    eps = np.zeros((1, 1, agent.sizes.A), np.float32)
    ep = play(env, lambda obs, info: agent.act(obs, eps=eps), T_max, start=(obs, info))
    t_success = ep.first_success if ep.first_success is not None else -1
    return EvalEpisode(reset_seed, float(ep.return_), t_success >= 0, ep.final_success, t_success, ep.steps)


def evaluation_record(episodes: list[EvalEpisode], confidence: float = 0.95) -> dict[str, Any]:
    """Success rates (any step, last step) with Wilson intervals over the episodes, and returns."""
    if not episodes:
        raise ValueError("episodes: expected at least one evaluation episode")
    n = len(episodes)
    out: dict[str, Any] = {"n": n}
    for key in ("success", "final_success"):
        k = sum(int(getattr(e, key)) for e in episodes)
        lo, hi = wilson_interval(k, n, confidence)
        out[key] = {"rate": k / n, "successes": k, "low": lo, "high": hi}
    rets = np.array([e.ret for e in episodes])
    out["return_mean"] = float(rets.mean())
    out["return_std"] = float(rets.std())
    out["episodes"] = [asdict(e) for e in episodes]
    return out
