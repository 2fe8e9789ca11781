"""A single-task Dreamer-v3 learning run on Meta-World, resumable after a kill (``metacog train learn``).

Loop (DreamerV3's schedule, per episode instead of per step):

1. evaluation at env step 0 (the untrained actor);
2. prefill: ``prefill_steps`` env steps of uniformly random actions, then ``pretrain_updates``;
3. training episodes with the agent (the actor sampled, as DreamerV3 explores), each followed by
   ``train_ratio * steps / (batch * seq_len)`` updates (the fraction carried to the next episode);
4. every ``eval_every`` training env steps: ``eval_episodes`` evaluation episodes
   (:mod:`metacog_fast.metaworld.learn.eval`), one record ``evals/<env_steps>.json`` and the curves
   (:mod:`metacog_fast.metaworld.learn.records`), then a checkpoint;
5. stop at ``env_steps`` (a later call with a larger target continues the same run).

Run folder: ``config.json`` (the RunFolder snapshot; a resumed run must match it except
``env_steps``), ``ckpt/latest.json`` + the ``ckpt/latest.<k>.safetensors`` it names (world model,
actor-critic, Adam moments, return scale; the JSON holds the runner state: env steps, episodes, updates, update credit, numpy and
torch RNG states, training-episode returns), ``replay/ep_*.npz`` (every training episode, atomic),
``evals/*.json``, ``curve.{json,csv}``, ``train_curve.csv``.

Resume: the checkpoint is taken at an episode boundary; replay files written after it are dropped,
the RNG states restored, so a killed run continues the same curve (the test kills one and compares
its records with an uninterrupted run's). Evaluation uses its own seeds (a function of the run seed
and the env step), so it never moves the training RNG.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from metacog_fast.metaworld.muse_wm import ActConfig, MuseWMAgent
from metacog_fast.metaworld.env import MT10_TASKS, NOVEL_TASKS, MetaWorldEnv
from metacog_fast.metaworld.models.dreamer import Dreamer
from metacog_fast.runs.folder import RunFolder
from metacog_fast.metaworld.train import checkpoint as ck
from metacog_fast.metaworld.learn.config import SNAPSHOT_IGNORE, LearnConfig, LearnJob
from metacog_fast.metaworld.learn.eval import eval_episode, evaluation_record
from metacog_fast.metaworld.learn.records import eval_key, write_curves, write_train_curve
from metacog_fast.metaworld.train.replay import ReplayBuffer
from metacog_fast.metaworld.train.rollout import agent_episode, scripted_episode
from metacog_fast.metaworld.train.runner import set_threads

__all__ = ["LearnRunner", "default_run_dir", "learn_metaworld", "read_learn_state"]

EVAL_SEED_OFFSET = 7_919_000_000
"""Evaluation layouts are drawn from seeds far from the training episodes' (no layout is shared)."""


def default_run_dir(cfg: LearnConfig) -> Path:
    """runs/metaworld/learn/<task>/seed<seed>."""
    return Path("runs/metaworld/learn") / cfg.task / f"seed{cfg.seed}"


def read_learn_state(run_dir: str | Path) -> dict[str, Any]:
    """The runner state of the last checkpoint of a learning run."""
    p = Path(run_dir) / "ckpt" / "latest.json"
    if not p.exists():
        raise ValueError(f"run_dir: {run_dir} has no checkpoint (ckpt/latest.json)")
    return json.loads(p.read_text())["meta"]


class LearnRunner:
    """Runs (or resumes) the learning run of ``cfg`` in ``run_dir``.

    ``progress``: a tqdm bar over env steps. ``stop_after``: optional callable(state) -> bool checked
    after every training episode (a checkpoint is written before stopping; tests use it).
    """

    def __init__(self, cfg: LearnConfig, run_dir: str | Path, progress: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.folder = RunFolder(self.run_dir, cfg.to_dict(), ignore=SNAPSHOT_IGNORE)
        self.cfg = cfg
        self.progress = progress
        self.latest = self.run_dir / "ckpt" / "latest"
        set_threads(cfg.torch_threads)
        self.model = Dreamer(cfg.model)
        if self.latest.with_suffix(".json").exists():
            doc = json.loads(self.latest.with_suffix(".json").read_text())
            tensors = ck.read_tensors(self.latest, doc)
            sd = {k: v for k, v in tensors.items() if not k.startswith("opt.")}
            missing, unexpected = self.model.load_state_dict(sd, strict=False)
            if missing or unexpected:
                raise ValueError(f"checkpoint {self.latest}: missing keys {missing[:5]}, unexpected {unexpected[:5]}")
            self.model.load_optimizer_tensors({k[4:]: v for k, v in tensors.items() if k.startswith("opt.")})
            self.state = doc["meta"]
            self.rng = np.random.default_rng()
            ck.set_rng_state(self.rng, self.state["rng"])
            ck.set_torch_rng(self.state["torch_rng"])
            self.state["resumed"] += 1
        else:
            self.rng = np.random.default_rng(cfg.seed)
            torch.manual_seed(cfg.seed)
            self.state = {
                "env_steps": 0, "episodes": 0, "updates": 0, "update_credit": 0.0, "pretrained": False,
                "evals": 0, "train_episodes": [], "resumed": 0, "wall_seconds": 0.0,
                "update_seconds": 0.0, "env_seconds": 0.0, "eval_seconds": 0.0, "last_metrics": {},
            }
        parts = self.state.setdefault("precisions", [])
        if not parts or parts[-1]["precision"] != self.model.precision:
            parts.append({"from_env_steps": self.state["env_steps"], "precision": self.model.precision})
        self.replay = ReplayBuffer(self.run_dir / "replay", cfg.model.N)
        self.replay.load_dir(keep=self.state["episodes"])
        one_hot = cfg.task in MT10_TASKS + NOVEL_TASKS
        self.env = MetaWorldEnv(task=cfg.task, seed=cfg.seed, max_episode_steps=cfg.max_episode_steps,
                                zero_task_embedding=not one_hot)
        self._agent: MuseWMAgent | None = None
        self._t0 = time.perf_counter()
        self._bar: Any = None

    # --- pieces ---------------------------------------------------------------------------------

    def agent(self, seed: int) -> MuseWMAgent:
        """The acting agent on the current weights (actor only: Dreamer-v3), noise seeded by ``seed``."""
        w, enc = self.model.acting_weights()
        if self._agent is None:
            self._agent = MuseWMAgent(w, enc, ActConfig(self_regulation=False), classes=self.cfg.model.C, seed=seed)
        else:
            self._agent.load(w, enc)
            self._agent.rng = np.random.default_rng(seed)
        return self._agent

    def _reset_seed(self) -> int:
        """Training layout of episode k: a function of the run seed and k only."""
        return int(self.cfg.seed * 1_000_003 + self.state["episodes"])

    def update(self, n: int) -> None:
        """``n`` world-model + actor-critic updates on replay batches."""
        cfg = self.cfg
        t0 = time.perf_counter()
        for _ in range(n):
            batch = self.replay.sample(self.rng, cfg.batch, cfg.seq_len)
            m = self.model.train_step({k: torch.from_numpy(v) for k, v in batch.items()}, cfg.ac_starts)
            self.state["updates"] += 1
            self.state["last_metrics"] = m
        self.state["update_seconds"] += time.perf_counter() - t0

    def evaluate(self) -> dict[str, Any]:
        """``eval_episodes`` evaluation episodes on the current weights; writes their record."""
        cfg, st = self.cfg, self.state
        t0 = time.perf_counter()
        base = EVAL_SEED_OFFSET + cfg.seed * 1_000_003 + st["env_steps"]
        agent = self.agent(seed=base)
        eps = [eval_episode(self.env, agent, cfg.max_episode_steps, base * 131 + i) for i in range(cfg.eval_episodes)]
        dt = time.perf_counter() - t0
        st["eval_seconds"] += dt
        rec = {"task": cfg.task, "seed": cfg.seed, "env_steps": st["env_steps"], "episodes": st["episodes"],
               "updates": st["updates"], **evaluation_record(eps),
               "train_losses": {k: v for k, v in st["last_metrics"].items()},
               "timing": self._timing(extra_eval=dt)}
        self.folder.write(eval_key(st["env_steps"]), rec)  # a record that exists (replayed after a kill) stays
        st["evals"] += 1
        write_curves(self.run_dir)
        return rec

    def _timing(self, extra_eval: float = 0.0) -> dict[str, float]:
        """Wall-clock figures (not part of the curve: they vary with the machine's load)."""
        st = self.state
        wall = st["wall_seconds"] + time.perf_counter() - self._t0
        return {"wall_seconds": wall, "update_seconds": st["update_seconds"], "env_seconds": st["env_seconds"],
                "eval_seconds": st["eval_seconds"],
                "updates_per_second": st["updates"] / st["update_seconds"] if st["update_seconds"] else None,
                "env_steps_per_second": st["env_steps"] / st["env_seconds"] if st["env_seconds"] else None}

    def checkpoint(self) -> None:
        st = self.state
        st["rng"] = ck.rng_state(self.rng)
        st["torch_rng"] = ck.torch_rng_bytes()
        st["wall_seconds"] += time.perf_counter() - self._t0
        self._t0 = time.perf_counter()
        ck.save_checkpoint(self.latest, self.model, self.cfg, meta=st, versioned=True)  # type: ignore[arg-type]
        write_train_curve(self.run_dir, st["train_episodes"])

    def _eval_due(self) -> bool:
        st = self.state
        return st["env_steps"] // self.cfg.eval_every >= st["evals"]

    # --- the loop --------------------------------------------------------------------------------

    def run(self, stop_after: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
        """Train up to ``cfg.env_steps`` (or until ``stop_after(state)``). Returns the state."""
        cfg, st = self.cfg, self.state
        if self.progress:
            from tqdm import tqdm

            self._bar = tqdm(total=cfg.env_steps, initial=min(st["env_steps"], cfg.env_steps), unit="step",
                             desc=f"dreamer/{cfg.task}/seed{cfg.seed}", dynamic_ncols=True)
        try:
            if self._eval_due():
                self._tick(self.evaluate())
                self.checkpoint()
            while st["env_steps"] < cfg.env_steps:
                self._episode()
                if self._eval_due():
                    self._tick(self.evaluate())
                    self.checkpoint()
                elif st["episodes"] % cfg.checkpoint_every == 0:
                    self.checkpoint()
                if stop_after is not None and stop_after(st):
                    self.checkpoint()
                    break
            else:
                self.checkpoint()
            return st
        finally:
            if self._bar is not None:
                self._bar.close()
            self.env.close()

    def _episode(self) -> None:
        """One training episode (random during the prefill, else the agent) and its updates."""
        cfg, st = self.cfg, self.state
        t0 = time.perf_counter()
        if st["env_steps"] < cfg.prefill_steps:
            ep = scripted_episode(self.env, self.rng, cfg.max_episode_steps, 0.0, 1.0, self._reset_seed(),
                                  cfg.model.action_dim)
            source = "random"
        else:
            ep = agent_episode(self.env, self.agent(int(self.rng.integers(2**31))), cfg.max_episode_steps,
                               self._reset_seed())
            source = "agent"
        st["env_seconds"] += time.perf_counter() - t0
        self.replay.add(ep)
        st["episodes"] += 1
        st["env_steps"] += ep.steps
        st["train_episodes"].append({"episode": st["episodes"], "env_steps": st["env_steps"],
                                     "return": round(float(ep.reward.sum()), 4), "success": int(ep.t_success >= 0),
                                     "source": source})
        if st["env_steps"] >= cfg.prefill_steps:
            if not st["pretrained"]:
                self.update(cfg.pretrain_updates)
                st["pretrained"] = True
            else:
                st["update_credit"] += ep.steps * cfg.updates_per_step()
                n = int(math.floor(st["update_credit"] + 1e-9))
                st["update_credit"] -= n
                self.update(n)
        self._tick()

    def _tick(self, rec: dict[str, Any] | None = None) -> None:
        if self._bar is None:
            return
        st = self.state
        if rec is not None:
            self._last_eval = rec
        post: dict[str, Any] = {"upd": st["updates"]}
        last = getattr(self, "_last_eval", None)
        if last is not None:
            post["succ"] = f"{last['success']['rate']:.2f}"
            post["eval_ret"] = f"{last['return_mean']:.0f}"
        if st["train_episodes"]:
            post["ret"] = f"{st['train_episodes'][-1]['return']:.0f}"
        self._bar.n = min(st["env_steps"], self.cfg.env_steps)
        self._bar.set_postfix(**post, refresh=False)
        self._bar.refresh()


def learn_metaworld(cfg: LearnConfig, job: LearnJob) -> dict[str, Any]:
    """What ``metacog train learn`` runs: the run of ``cfg`` in ``job.run_dir`` (resumed), then its
    curve copied to ``job.out`` when given. Returns the runner state."""
    run_dir = Path(job.run_dir) if job.run_dir else default_run_dir(cfg)
    state = LearnRunner(cfg, run_dir, progress=job.progress).run()
    if job.out:
        write_curves(run_dir, Path(job.out))
    print(f"{cfg.task} seed {cfg.seed}: {state['env_steps']} env steps, {state['updates']} updates, "
          f"{state['evals']} evaluations -> {run_dir}")
    return state
