"""Evaluation episodes of a learning run: the actor's mean action (no exploration noise, no
training), on fresh layouts, scored two ways (Meta-World's "success at any step" and TD-MPC2's
"success at the last step", the definition of the published curves)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

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
    obs, _ = env.reset(seed=reset_seed)
    agent.reset()
    eps = np.zeros((1, 1, agent.sizes.A), np.float32)
    ret, t_success, success = 0.0, -1, False
    steps = 0
    for t in range(T_max):
        obs, r, done, info = env.step(agent.act(obs, eps=eps))
        ret += r
        steps += 1
        success = bool(info["success"])
        if success and t_success < 0:
            t_success = t + 1
        if done:
            break
    return EvalEpisode(reset_seed, float(ret), t_success >= 0, success, t_success, steps)


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
