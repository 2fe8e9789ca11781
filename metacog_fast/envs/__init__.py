"""Environment adapters behind one protocol (see :mod:`metacog_fast.envs.base`).

    from metacog_fast.envs import make_env, play
    env = make_env("metaworld", task="reach-v3", seed=0)   # "alfworld", "scienceworld"
    obs, info = env.reset()
    obs, reward, done, info = env.step(env.expert())
    ep = play(env, lambda obs, info: env.expert(), max_steps=50)   # one episode (see envs.driver)

Adapters load their simulator lazily, so importing this package is cheap.
"""
from __future__ import annotations

from metacog_fast.envs.base import Env, EnvSetupError, EnvTimings, EpisodeFinishedError
from metacog_fast.envs.driver import STOP, Episode, Policy, Step, play, sequence_policy, success_of
from metacog_fast.envs.probe import ProbeResult, probe_envs
from metacog_fast.envs.registry import ENV_FACTORIES, make_env

__all__ = [
    "Env",
    "EnvSetupError",
    "EnvTimings",
    "EpisodeFinishedError",
    "Episode",
    "Policy",
    "STOP",
    "Step",
    "play",
    "sequence_policy",
    "success_of",
    "ENV_FACTORIES",
    "make_env",
    "probe_envs",
    "ProbeResult",
]
