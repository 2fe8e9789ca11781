"""MUSE-WM acting loop and training throughput.

    pytest bench/bench_muse_wm.py --benchmark-json=bench/results/muse_wm.json

1. Acting loop (encoder + ``rssm_obs_step`` posterior + ``self_assess`` + ``self_regulate`` H=10,
   beta=0.02 + action), XS model, batch 1, one thread: the agent on the fused backend ("auto",
   the compiled CPU kernel when this build has it) against the same agent on the torch reference
   in the same run. extra_info: decisions_per_s, backend, ratio_vs_torch (and the target 250/s).
2. Dreamer-v3 acting (H = 0) the same way.
3. Training: one world-model + actor-critic update (XS, batch 8 x 32 rows, 128 imagination
   starts, horizon 15): updates_per_s, rows_per_s.
4. Data collection: env steps/s of a Meta-World agent episode (acting included) and of a
   scripted-policy episode.
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch

from metacog_fast.metaworld.muse_wm import ActConfig, MuseWMAgent
from metacog_fast.metaworld.models.dreamer import Dreamer, DreamerConfig
from metacog_fast.ops.rssm import resolved_backend

TARGET_DECISIONS_PER_S = 250.0
_TORCH_RATE: dict[str, float] = {}


def _agent(backend: str, regulate: bool) -> MuseWMAgent:
    w, enc = Dreamer(DreamerConfig(preset="XS", seed=0)).acting_weights()
    return MuseWMAgent(w, enc, ActConfig(backend=backend, self_regulation=regulate, sr_z="posterior"), seed=0)


def _obs(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(59).astype(np.float32) for _ in range(n)]


def _rate(agent: MuseWMAgent, obs: list[np.ndarray]) -> float:
    agent.reset()
    t0 = time.perf_counter()
    for o in obs:
        agent.act(o)
    return len(obs) / (time.perf_counter() - t0)


def _torch_rate(regulate: bool) -> float:
    key = f"sr{int(regulate)}"
    if key not in _TORCH_RATE:
        ag = _agent("torch", regulate)
        _rate(ag, _obs(5))
        _TORCH_RATE[key] = max(_rate(ag, _obs(60)) for _ in range(2))
    return _TORCH_RATE[key]


@pytest.mark.parametrize("regulate", [True, False], ids=["muse_H10", "dreamer_H0"])
@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_acting_loop(benchmark, torch_threads, backend, regulate):
    torch_threads(1)
    agent = _agent(backend, regulate)
    resolved = resolved_backend(agent.w, agent.h, backend)
    obs = _obs(20)
    agent.act(obs[0])
    torch_rate = _torch_rate(regulate)  # the anchor, measured in this run

    def loop() -> None:
        for o in obs:
            agent.act(o)

    benchmark.pedantic(loop, rounds=5, iterations=1, warmup_rounds=1)
    per_s = len(obs) / benchmark.stats.stats.median
    benchmark.extra_info.update(
        decisions_per_s=per_s, backend=resolved, batch=1, threads=1, preset="XS",
        H=10 if regulate else 0, torch_reference_decisions_per_s=torch_rate, ratio_vs_torch=per_s / torch_rate,
        target_decisions_per_s=TARGET_DECISIONS_PER_S, meets_target=per_s >= TARGET_DECISIONS_PER_S,
        load_average_1min=os.getloadavg()[0],  # the machine is shared: read numbers against this
    )


def test_training_update(benchmark, torch_threads):
    torch_threads(1)
    torch.manual_seed(0)
    m = Dreamer(DreamerConfig(preset="XS"))
    B, T = 8, 32
    g = torch.Generator().manual_seed(0)
    batch = {
        "obs": torch.randn(B, T, 59, generator=g), "prev_action": torch.rand(B, T, 4, generator=g) * 2 - 1,
        "reward": torch.rand(B, T, generator=g), "cont": torch.ones(B, T),
        "labels": (torch.rand(B, T, 5, generator=g) > 0.5).float(),
    }
    m.train_step(batch, 128)
    benchmark.pedantic(lambda: m.train_step(batch, 128), rounds=3, iterations=1)
    med = benchmark.stats.stats.median
    benchmark.extra_info.update(updates_per_s=1.0 / med, rows_per_s=B * T / med, batch=B, seq_len=T,
                                imagination_starts=128, horizon=15, threads=1,
                                load_average_1min=os.getloadavg()[0])


@pytest.mark.parametrize("driver", ["agent_muse", "scripted"])
def test_env_steps(benchmark, torch_threads, driver):
    pytest.importorskip("metaworld")
    from metacog_fast.metaworld.train.rollout import agent_episode, make_metaworld, scripted_episode

    torch_threads(1)
    env = make_metaworld("coffee-button-v3", 0, 50, novel=True)
    rng = np.random.default_rng(0)
    agent = _agent("auto", True) if driver == "agent_muse" else None

    def run() -> int:
        if agent is not None:
            return agent_episode(env, agent, 50, 1).steps
        return scripted_episode(env, rng, 50, 0.3, 0.0, 1).steps

    benchmark.pedantic(run, rounds=3, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(env_steps_per_s=50 / benchmark.stats.stats.median, driver=driver,
                                backend="auto" if agent else None,
                                load_average_1min=os.getloadavg()[0])
    env.close()
