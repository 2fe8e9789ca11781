"""A short MUSE-WM episode on one novel task, self-regulating at every step (``metacog demo --parts muse_wm``)."""
from __future__ import annotations

import time
from typing import Any


def demo_part(task: str = "coffee-button-v3", steps: int = 100, checkpoint: str | None = None,
              sr_z: str = "prior", backend: str = "auto", seed: int = 0, threads: int = 1) -> dict[str, Any]:
    """A short MUSE-WM episode on one novel task (task embedding zeroed), self-regulating at every
    step. Uses ``checkpoint`` when given, else fresh XS weights. Returns decisions/s (acting only,
    env time excluded, the first decision — weight preparation — excluded), success, mean psi sum,
    and the backend used. ``threads``: torch and core threads during the demo (1 = batch-1 best)."""
    import numpy as np

    from metacog_fast.train.runner import set_threads

    set_threads(threads)

    from metacog_fast.agents.muse_wm import MuseWMAgent
    from metacog_fast.models.dreamer import Dreamer, DreamerConfig
    from metacog_fast.train.config import ActConfig
    from metacog_fast.train.rollout import make_metaworld

    act = ActConfig(sr_z=sr_z, backend=backend)
    if checkpoint:
        agent = MuseWMAgent.from_checkpoint(checkpoint, act=act, seed=seed)
    else:
        w, enc = Dreamer(DreamerConfig(seed=seed)).acting_weights()
        agent = MuseWMAgent(w, enc, act, seed=seed)
    env = make_metaworld(task, seed, steps, novel=True)
    obs, _ = env.reset()
    agent.reset()
    act_s, psis, success = 0.0, [], False
    for i in range(steps):
        t0 = time.perf_counter()
        a = agent.act(obs)
        if i:  # the first call prepares (validates, packs) the weights
            act_s += time.perf_counter() - t0
        psis.append(float(agent.psi.sum()))
        obs, _, done, info = env.step(a)
        success |= bool(info["success"])
        if done:
            break
    env.close()
    from metacog_fast.ops.rssm import resolved_backend  # for the report

    be = resolved_backend(agent.w, agent.h, backend)
    res = {"task": task, "steps": len(psis), "decisions_per_second": (len(psis) - 1) / act_s if act_s else float("nan"), "success": success,
           "mean_psi_sum": float(np.mean(psis)), "psi_sums": psis, "backend": be, "sr_z": sr_z,
           "weights": f"checkpoint {checkpoint}" if checkpoint else "fresh XS weights (untrained)"}
    print(f"MUSE-WM on {task}: {res['decisions_per_second']:.0f} decisions/s ({be} backend, H=10), "
          f"success={success}, mean sum(psi)={res['mean_psi_sum']:.2f}")
    return res
