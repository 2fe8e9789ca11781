"""Time what a learning run spends its time on, at a run's own sizes: one update (world model +
actor-critic) in bfloat16 and in float32, sides alternating over rounds, and env steps per second
of the acting agent (Meta-World step + the fused acting kernels).

    python -m metacog_fast.metaworld.learn.profile --replay runs/metaworld/learn/reach-v3/seed0/replay \
        --out results/metaworld/learning/update_profile.json

Take the benchmark lock and pause the background jobs around it (docs/muse_wm.md); the numbers
are wall-clock seconds on whatever else the machine is doing.
"""
from __future__ import annotations

import argparse
import platform
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from metacog_fast.envs.driver import play
from metacog_fast.metaworld.models.dreamer import Dreamer
from metacog_fast.metaworld.learn.config import LearnConfig
from metacog_fast.metaworld.train.replay import ReplayBuffer

__all__ = ["profile_updates", "profile_env_steps"]


def profile_updates(cfg: LearnConfig, replay: ReplayBuffer, rounds: int = 3, updates: int = 5) -> dict[str, Any]:
    """Median seconds per update of ``cfg``'s model in each precision, sides alternating per round."""
    rng = np.random.default_rng(0)
    batches = [{k: torch.from_numpy(v) for k, v in replay.sample(rng, cfg.batch, cfg.seq_len).items()}
               for _ in range(updates)]
    models = {p: Dreamer(replace(cfg.model, precision=p)) for p in ("bfloat16", "float32")}
    for m in models.values():  # warm-up (allocations, autocast caches)
        m.train_step(batches[0], cfg.ac_starts)
    times: dict[str, list[float]] = {p: [] for p in models}
    for _ in range(rounds):
        for p, m in models.items():
            t0 = time.perf_counter()
            for b in batches:
                m.train_step(b, cfg.ac_starts)
            times[p].append((time.perf_counter() - t0) / len(batches))
    out = {p: {"seconds_per_update": float(np.median(v)), "rounds": v} for p, v in times.items()}
    out["bf16_speedup"] = out["float32"]["seconds_per_update"] / out["bfloat16"]["seconds_per_update"]
    return out


def profile_env_steps(cfg: LearnConfig, steps: int = 1000) -> dict[str, float]:
    """Env steps per second with the (untrained) agent acting, as in a training episode."""
    from metacog_fast.metaworld.muse_wm import ActConfig, MuseWMAgent
    from metacog_fast.metaworld.env import MetaWorldEnv

    w, enc = Dreamer(cfg.model).acting_weights()
    agent = MuseWMAgent(w, enc, ActConfig(self_regulation=False), classes=cfg.model.C, seed=0)
    env = MetaWorldEnv(task=cfg.task, seed=0, max_episode_steps=cfg.max_episode_steps)
    start = env.reset(seed=0)
    t0 = time.perf_counter()
    t = 0
    while t < steps:
        ep = play(env, lambda obs, info: agent.act(obs), steps - t, start=start)
        t += ep.steps
        if ep.done:  # the next layout is seeded with the global index of the episode's last step
            start = env.reset(seed=t - 1)
            agent.reset()
    dt = time.perf_counter() - t0
    env.close()
    return {"env_steps_per_second": steps / dt, "steps": steps}


def main(argv: list[str] | None = None) -> int:
    from metacog_fast.runs.records import write_json_atomic
    from metacog_fast.metaworld.train.runner import set_threads

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replay", required=True, help="replay folder of a learning run (ep_*.npz)")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--updates", type=int, default=5, help="updates per side per round (default 5)")
    a = p.parse_args(argv)
    cfg = LearnConfig()
    set_threads(cfg.torch_threads)
    replay = ReplayBuffer(Path(a.replay), cfg.model.N)
    replay.load_dir()
    if not len(replay):
        raise SystemExit(f"--replay: {a.replay} holds no episodes")
    doc = {"config": cfg.to_dict(), "threads": torch.get_num_threads(), "machine": platform.processor() or platform.machine(),
           "updates": profile_updates(cfg, replay, a.rounds, a.updates), "env": profile_env_steps(cfg)}
    write_json_atomic(a.out, doc)
    print({k: doc["updates"][k] for k in ("bfloat16", "float32", "bf16_speedup")}, doc["env"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
