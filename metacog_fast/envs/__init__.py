"""Environment adapters behind one protocol (see :mod:`metacog_fast.envs.base`).

    from metacog_fast.envs import make_env
    env = make_env("metaworld", task="reach-v3", seed=0)   # "alfworld", "scienceworld"
    obs, info = env.reset()
    obs, reward, done, info = env.step(env.expert())

Adapters load their simulator lazily, so importing this package is cheap.
"""
from __future__ import annotations

from metacog_fast.envs.base import Env, EnvSetupError, EnvTimings, EpisodeFinishedError
from metacog_fast.envs.probe import ProbeResult, probe_envs
from metacog_fast.envs.registry import ENV_FACTORIES, make_env

__all__ = [
    "Env",
    "EnvSetupError",
    "EnvTimings",
    "EpisodeFinishedError",
    "ENV_FACTORIES",
    "make_env",
    "probe_envs",
    "ProbeResult",
]
