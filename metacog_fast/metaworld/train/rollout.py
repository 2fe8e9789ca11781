"""Running episodes in Meta-World: noisy scripted-policy episodes (replay seeding) and agent
episodes (with the per-step self-assessment psi recorded)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from metacog_fast.envs.driver import play
from metacog_fast.metaworld.muse_wm import MuseWMAgent
from metacog_fast.metaworld.train.replay import Episode, EpisodeRecorder

if TYPE_CHECKING:
    from metacog_fast.envs.base import Env


def make_metaworld(task: str, seed: int, T_max: int, novel: bool) -> Any:
    """A Meta-World env (state + 20-d task one-hot, zeroed for novel tasks), domain randomised."""
    try:
        from metacog_fast.envs import make_env  # the shared factory, when present
    except ImportError:
        make_env = None
    if make_env is not None:
        return make_env("metaworld", task=task, seed=seed, max_episode_steps=T_max, zero_task_embedding=novel)
    from metacog_fast.metaworld.env import MetaWorldEnv

    return MetaWorldEnv(task=task, seed=seed, max_episode_steps=T_max, zero_task_embedding=novel)


def scripted_episode(env: Env, rng: np.random.Generator, T_max: int, noise: float, delay: float,
                     reset_seed: int, action_dim: int = 4) -> Episode:
    """The expert with Gaussian action noise ``noise``, taking over after ``delay * T_max`` steps of
    uniformly random actions (``delay >= 1``: random actions throughout)."""
    obs, info = env.reset(seed=reset_seed)
    rec = EpisodeRecorder(obs, action_dim, info.get("task", ""), T_max, f"scripted:{noise:g}:{delay:g}")
    start = int(round(delay * T_max))
    t = 0

    def policy(obs: Any, info: dict[str, Any]) -> np.ndarray:
        nonlocal t
        if t < start:
            a = rng.uniform(-1.0, 1.0, action_dim).astype(np.float32)
        else:
            a = env.expert() + noise * rng.standard_normal(action_dim).astype(np.float32)
            a = np.clip(a, -1.0, 1.0).astype(np.float32)
        t += 1
        return a

    play(env, policy, T_max, start=(obs, info), on_step=lambda s: rec.add(s.obs, s.action, s.reward, s.info["success"]))
    return rec.finish()


def agent_episode(env: Env, agent: MuseWMAgent, T_max: int, reset_seed: int, source: str = "agent") -> Episode:
    """One episode driven by ``agent``; records psi [T+1, N] (psi of each observed state, the last
    observation included) under ``extra["psi"]``."""
    obs, info = env.reset(seed=reset_seed)
    agent.reset()
    rec = EpisodeRecorder(obs, agent.sizes.A, info.get("task", ""), T_max, source)

    def policy(obs: Any, info: dict[str, Any]) -> np.ndarray:
        a = agent.act(obs)
        rec.add_extra("psi", agent.psi)
        return a

    ep = play(env, policy, T_max, start=(obs, info),
              on_step=lambda s: rec.add(s.obs, s.action, s.reward, s.info["success"]))
    # psi of the final observation (no action is taken there)
    agent.act(ep.obs)
    rec.add_extra("psi", agent.psi)
    return rec.finish()
