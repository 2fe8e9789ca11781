"""MUSE-WM beside Dreamer-v3 on one novel task, same weights and seed (``metacog demo --parts muse_wm``):
MUSE self-regulates at every step (Algorithm 1) and reports its competence estimate Σψ; Dreamer-v3
acts with the actor alone."""
from __future__ import annotations

from typing import Any


def _episode(task: str, steps: int, checkpoint: str | None, self_regulation: bool, sr_z: str, backend: str,
             seed: int) -> dict[str, Any]:
    import numpy as np

    from metacog_fast.envs.driver import Step, play
    from metacog_fast.metaworld.muse_wm import MuseWMAgent
    from metacog_fast.metaworld.models.dreamer import Dreamer, DreamerConfig
    from metacog_fast.ops.rssm import resolved_backend
    from metacog_fast.metaworld.train.config import ActConfig
    from metacog_fast.metaworld.train.rollout import make_metaworld

    act = ActConfig(self_regulation=self_regulation, sr_z=sr_z, backend=backend)
    if checkpoint:
        agent = MuseWMAgent.from_checkpoint(checkpoint, act=act, seed=seed)
    else:
        w, enc = Dreamer(DreamerConfig(seed=seed)).acting_weights()
        agent = MuseWMAgent(w, enc, act, seed=seed)
    env = make_metaworld(task, seed, steps, novel=True)
    start = env.reset()
    agent.reset()
    act_s, psis = 0.0, []

    def policy(obs: Any, info: dict[str, Any]) -> Any:
        a = agent.act(obs)
        if self_regulation:
            psis.append(float(agent.psi.sum()))
        return a

    def timed(step: Step) -> None:
        nonlocal act_s
        if step.t:  # the first call prepares (validates, packs) the weights
            act_s += step.policy_seconds

    ep = play(env, policy, steps, start=start, on_step=timed)
    env.close()
    n, success = ep.steps, ep.success
    return {"steps": n, "decisions_per_second": (n - 1) / act_s if act_s else float("nan"), "success": success,
            "psi_sums": psis, "mean_psi_sum": float(np.mean(psis)) if psis else None,
            "backend": resolved_backend(agent.w, agent.h, backend)}


def demo_part(task: str = "coffee-button-v3", steps: int = 100, checkpoint: str | None = None,
              sr_z: str = "prior", backend: str = "auto", seed: int = 0, threads: int = 1) -> dict[str, Any]:
    """One episode of MUSE-WM (self-regulating, H=10) and one of Dreamer-v3 (no self-regulation) on
    the novel ``task`` (task embedding zeroed), from the same weights (``checkpoint``, else fresh XS
    weights) and seed. Decisions/s count acting only (env time and the first decision, which
    prepares the weights, excluded). ``threads``: torch and core threads (1 = batch-1 best).

    Returns MUSE's figures at the top level (``psi_sums`` [steps]: Σψ per step) and Dreamer's under
    ``"dreamer"``; ``"weights"`` says whether they were trained."""
    from metacog_fast.metaworld.train.runner import set_threads

    set_threads(threads)
    muse = _episode(task, steps, checkpoint, True, sr_z, backend, seed)
    dreamer = _episode(task, steps, checkpoint, False, sr_z, backend, seed)
    res = {"task": task, **muse, "sr_z": sr_z, "dreamer": dreamer,
           "weights": f"checkpoint {checkpoint}" if checkpoint else "fresh XS weights (untrained)"}
    print(f"MUSE-WM on {task}: {muse['decisions_per_second']:.0f} decisions/s ({muse['backend']} backend, H=10), "
          f"success={muse['success']}, mean sum(psi)={muse['mean_psi_sum']:.2f}; Dreamer-v3: "
          f"{dreamer['decisions_per_second']:.0f} decisions/s, success={dreamer['success']}; weights: {res['weights']}")
    return res
