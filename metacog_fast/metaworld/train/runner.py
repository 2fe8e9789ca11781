"""The Meta-World protocol of paper 000 §3.2 for one agent, resumable after a kill.

Phases (``state["phase"]``):
1. ``seed``: noisy scripted-policy episodes on the pre-deployment tasks (replay seeding);
2. ``warmup``: world-model + actor-critic updates on that data;
3. ``pretrain``: agent episodes on the pre-deployment tasks (domain randomised), each followed
   by updates;
4. ``adapt``: for each novel task (task embedding zeroed): the pre-trained weights are loaded,
   ``adapt_episodes`` agent episodes, each followed by world-model updates on real data (new
   task + the kept pre-deployment replay) and actor-critic updates on imagined data;
5. ``done``.

Run folder layout: ``config.json`` (the configuration snapshot of ``metacog_fast.runs``: a resumed
run must match it); ``ckpt/latest.{safetensors,json}`` (model, Adam state and
the runner state: counters, RNG states, episode records); ``pretrained.{safetensors,json}``;
``replay/pretrain/ep_*.npz`` and ``replay/adapt/<task>/ep_*.npz`` (episodes, psi included).
A killed run restarted on the same folder continues from its last checkpoint: replay files
written after it are dropped and the RNG states restored.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from metacog_fast.metaworld.muse_wm import MuseWMAgent
from metacog_fast.metaworld.models.dreamer import Dreamer
from metacog_fast.runs.folder import RunFolder
from metacog_fast.metaworld.train import checkpoint as ck
from metacog_fast.metaworld.train.config import ProtocolConfig
from metacog_fast.metaworld.train.replay import ReplayBuffer
from metacog_fast.metaworld.train.rollout import agent_episode, make_metaworld, scripted_episode

WARMUP_CHECKPOINT_EVERY = 50
"""Updates between checkpoints during the warm-up phase."""


def set_threads(n: int) -> None:
    """torch intra-op threads and the compiled core's OpenMP threads. Acting at batch 1 runs best
    on one thread: on a busy machine the core's OpenMP barrier with 2 threads measured 7
    decisions/s against 127/s on one."""
    torch.set_num_threads(max(1, n))
    try:
        from metacog_fast._backend import core

        c = core()
        if hasattr(c, "set_num_threads"):
            c.set_num_threads(max(1, n))
    except Exception:  # no compiled core: the torch backend is used anyway
        pass


def _to_torch(batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v) for k, v in batch.items()}


class ProtocolRunner:
    """Runs (or resumes) the protocol of ``cfg`` in ``run_dir``.

    ``progress``: show a tqdm bar with the live success rate. ``stop_after``: optional
    callable(state) -> bool checked after each episode (tests use it to stop early).
    """

    def __init__(self, cfg: ProtocolConfig, run_dir: str | Path, progress: bool = True,
                 pretrained: str | Path | None = None, on_checkpoint: Callable[[], None] | None = None) -> None:
        self.run_dir = Path(run_dir)
        RunFolder(self.run_dir, cfg.to_dict())  # the snapshot: written, or checked when resuming
        self.progress = progress
        self.on_checkpoint = on_checkpoint
        """Called after every checkpoint (the run-folder files are complete at that moment)."""
        self.latest = self.run_dir / "ckpt" / "latest"
        self.pretrained_stem = Path(pretrained) if pretrained is not None else self.run_dir / "pretrained"
        self._adapt_only = pretrained is not None
        set_threads(cfg.torch_threads)
        if self.latest.with_suffix(".json").exists():
            self.model, self.cfg, self.state = ck.load_checkpoint(self.latest, cfg)
            self.rng = np.random.default_rng()
            ck.set_rng_state(self.rng, self.state["rng"])
            ck.set_torch_rng(self.state["torch_rng"])
            self.state["resumed"] = self.state.get("resumed", 0) + 1
        else:
            self.cfg = cfg
            self.model = Dreamer(cfg.model)
            self.rng = np.random.default_rng(cfg.seed)
            torch.manual_seed(cfg.seed)
            self.state = {
                "phase": "seed" if pretrained is None else "adapt", "scripted": 0, "agent_episodes": 0,
                "updates": 0, "env_steps": 0, "pretrain_replay": 0,
                "adapt": {"task_index": 0, "episode": 0}, "records": [], "pretrain_records": [],
                "resumed": 0, "wall_seconds": 0.0, "update_seconds": 0.0, "env_seconds": 0.0,
            }
        self.pre_replay = ReplayBuffer(self.run_dir / "replay" / "pretrain", cfg.model.N)
        if pretrained is None:
            self.pre_replay.load_dir(keep=self.state["pretrain_replay"])
        else:
            src = Path(pretrained).parent / "replay" / "pretrain"
            self.pre_replay = ReplayBuffer(src, cfg.model.N)
            self.pre_replay.load_dir()
        self.task_replay: ReplayBuffer | None = None
        self._agent: MuseWMAgent | None = None
        self._envs: dict[tuple[str, bool], Any] = {}
        self._t0 = time.perf_counter()
        self._bar = None

    # --- helpers ----------------------------------------------------------------------------

    def _env(self, task: str, novel: bool) -> Any:
        key = (task, novel)
        if key not in self._envs:
            self._envs[key] = make_metaworld(task, self.cfg.seed, self.cfg.max_episode_steps, novel)
        return self._envs[key]

    def _reset_seed(self) -> int:
        """Per-episode layout seed: a function of the run seed and the global episode count only,
        so a resumed run replays the same layouts."""
        n = self.state["scripted"] + self.state["agent_episodes"] + len(self.state["records"])
        return int(self.cfg.seed * 1_000_003 + n)

    def agent(self) -> MuseWMAgent:
        w, enc = self.model.acting_weights()
        if self._agent is None:
            self._agent = MuseWMAgent(w, enc, self.cfg.act, classes=self.cfg.model.C,
                                      seed=int(self.rng.integers(2**31)))
        else:
            self._agent.load(w, enc)
            self._agent.rng = np.random.default_rng(int(self.rng.integers(2**31)))
        return self._agent

    def _update(self, n: int, replay_new: ReplayBuffer | None = None) -> dict[str, float]:
        """``n`` updates; batches mix ``replay_new`` (adapt_new_fraction) and the pre-deployment replay."""
        cfg = self.cfg
        metrics: dict[str, float] = {}
        t0 = time.perf_counter()
        for _ in range(n):
            if replay_new is not None and len(replay_new):
                b_new = int(round(cfg.batch * cfg.adapt_new_fraction))
                parts = []
                if b_new:
                    parts.append(replay_new.sample(self.rng, b_new, cfg.seq_len))
                if cfg.batch - b_new:
                    parts.append(self.pre_replay.sample(self.rng, cfg.batch - b_new, cfg.seq_len))
                batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            else:
                batch = self.pre_replay.sample(self.rng, cfg.batch, cfg.seq_len)
            metrics = self.model.train_step(_to_torch(batch), cfg.ac_starts)
            self.state["updates"] += 1
        self.state["update_seconds"] += time.perf_counter() - t0
        return metrics

    def checkpoint(self) -> None:
        self.state["rng"] = ck.rng_state(self.rng)
        self.state["torch_rng"] = ck.torch_rng_bytes()
        self.state["pretrain_replay"] = len(self.pre_replay) if self.state["phase"] in ("seed", "warmup", "pretrain") \
            else self.state["pretrain_replay"]
        self.state["wall_seconds"] += time.perf_counter() - self._t0
        self._t0 = time.perf_counter()
        ck.save_checkpoint(self.latest, self.model, self.cfg, meta=self.state)
        if self.on_checkpoint is not None and self.state["phase"] != "done":
            self.on_checkpoint()

    def _total_episodes(self) -> int:
        c = self.cfg
        adapt = len(c.novel_tasks) * c.adapt_episodes
        if self._adapt_only:
            return adapt
        return len(c.train_tasks) * c.scripted.episodes_per_task + c.pretrain_episodes + adapt

    def _done_episodes(self) -> int:
        return self.state["scripted"] + self.state["agent_episodes"] + len(self.state["records"])

    def _tick(self, **postfix: Any) -> None:
        if self._bar is not None:
            self._bar.n = self._done_episodes()
            self._bar.set_postfix(**postfix, refresh=False)
            self._bar.refresh()

    def _live_success(self) -> float:
        recs = self.state["records"] or self.state["pretrain_records"]
        return float(np.mean([r["success"] for r in recs])) if recs else 0.0

    # --- phases ----------------------------------------------------------------------------

    def run(self, stop_after: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
        """Run to the end (or until ``stop_after(state)`` is true). Returns the state."""
        if self.progress:
            from tqdm import tqdm

            self._bar = tqdm(total=self._total_episodes(), initial=self._done_episodes(),
                             desc=f"{self.cfg.agent}/{self.cfg.profile}", unit="ep", dynamic_ncols=True)
        try:
            for phase in ("seed", "warmup", "pretrain", "adapt"):
                if self.state["phase"] == phase:
                    getattr(self, f"_phase_{phase}")(stop_after)
                    if self.state.get("stopped"):
                        return self.state
            return self.state
        finally:
            if self._bar is not None:
                self._bar.close()
            for env in self._envs.values():
                env.close()

    def _stop(self, stop_after: Callable | None) -> bool:
        if stop_after is not None and stop_after(self.state):
            self.checkpoint()
            self.state["stopped"] = True
            return True
        return False

    def _phase_seed(self, stop_after: Callable | None) -> None:
        cfg, sc = self.cfg, self.cfg.scripted
        jobs = [(ti, task, k) for k in range(sc.episodes_per_task) for ti, task in enumerate(cfg.train_tasks)]
        while self.state["scripted"] < len(jobs):
            ti, task, k = jobs[self.state["scripted"]]
            noise = sc.noise_levels[k % len(sc.noise_levels)]
            delay = sc.delay_fractions[(k + ti) % len(sc.delay_fractions)]
            t0 = time.perf_counter()
            ep = scripted_episode(self._env(task, False), self.rng, cfg.max_episode_steps, noise, delay,
                                  self._reset_seed(), cfg.model.action_dim)
            self.state["env_seconds"] += time.perf_counter() - t0
            self.pre_replay.add(ep)
            self.state["scripted"] += 1
            self.state["env_steps"] += ep.steps
            self._tick(phase="seed", ok=f"{float(ep.t_success >= 0):.0f}")
            if self.state["scripted"] % cfg.checkpoint_every == 0:
                self.checkpoint()
            if self._stop(stop_after):
                return
        self.state["phase"] = "warmup"
        self.checkpoint()

    def _phase_warmup(self, stop_after: Callable | None) -> None:
        cfg = self.cfg
        while self.state["updates"] < cfg.pretrain_warmup_updates:
            n = min(WARMUP_CHECKPOINT_EVERY, cfg.pretrain_warmup_updates - self.state["updates"])
            m = self._update(n)
            self.checkpoint()
            self._tick(phase="warmup", upd=self.state["updates"], wm=f"{m.get('loss_wm', 0):.2f}")
            if self._stop(stop_after):
                return
        self.state["phase"] = "pretrain"
        self.checkpoint()

    def _phase_pretrain(self, stop_after: Callable | None) -> None:
        cfg = self.cfg
        while self.state["agent_episodes"] < cfg.pretrain_episodes:
            task = cfg.train_tasks[self.state["agent_episodes"] % len(cfg.train_tasks)]
            t0 = time.perf_counter()
            ep = agent_episode(self._env(task, False), self.agent(), cfg.max_episode_steps, self._reset_seed())
            self.state["env_seconds"] += time.perf_counter() - t0
            self.pre_replay.add(ep)
            self.state["agent_episodes"] += 1
            self.state["env_steps"] += ep.steps
            self.state["pretrain_records"].append({"task": task, "success": int(ep.t_success >= 0),
                                                   "t_success": ep.t_success, "return": float(ep.reward.sum())})
            self._update(cfg.pretrain_updates_per_episode)
            self._tick(phase="pretrain", succ=f"{self._live_success():.2f}", upd=self.state["updates"])
            if self.state["agent_episodes"] % cfg.checkpoint_every == 0:
                self.checkpoint()
            if self._stop(stop_after):
                return
        self.state["phase"] = "adapt"
        self.state["pretrain_replay"] = len(self.pre_replay)
        ck.save_checkpoint(self.pretrained_stem, self.model, self.cfg, meta={"pretrain_replay": len(self.pre_replay)})
        self.checkpoint()

    def _phase_adapt(self, stop_after: Callable | None) -> None:
        cfg = self.cfg
        ad = self.state["adapt"]
        while ad["task_index"] < len(cfg.novel_tasks):
            task = cfg.novel_tasks[ad["task_index"]]
            tdir = self.run_dir / "replay" / "adapt" / task
            if ad["episode"] == 0:
                # a new task starts from the pre-trained weights (and their optimiser state)
                self.model, _, _ = ck.load_checkpoint(self.pretrained_stem, self.cfg)
                if tdir.exists():
                    shutil.rmtree(tdir)
            self.task_replay = ReplayBuffer(tdir, cfg.model.N)
            self.task_replay.load_dir(keep=ad["episode"])
            while ad["episode"] < cfg.adapt_episodes:
                t0 = time.perf_counter()
                ep = agent_episode(self._env(task, True), self.agent(), cfg.max_episode_steps, self._reset_seed())
                self.state["env_seconds"] += time.perf_counter() - t0
                self.task_replay.add(ep)
                self.state["env_steps"] += ep.steps
                self.state["records"].append({
                    "task": task, "episode": ad["episode"], "success": int(ep.t_success >= 0),
                    "t_success": ep.t_success, "steps": ep.steps, "return": float(ep.reward.sum()),
                    "psi_sum_mean": float(ep.extra["psi"].sum(-1).mean()),
                })
                ad["episode"] += 1
                self._update(cfg.adapt_updates_per_episode, self.task_replay)
                self._tick(phase="adapt", task=task.replace("-v3", ""), succ=f"{self._live_success():.2f}")
                if ad["episode"] % cfg.checkpoint_every == 0 or ad["episode"] == cfg.adapt_episodes:
                    if ad["episode"] == cfg.adapt_episodes:
                        ad["task_index"] += 1
                        ad["episode"] = 0
                    self.checkpoint()
                    if ad["episode"] == 0:
                        break
                if self._stop(stop_after):
                    return
        self.state["phase"] = "done"
        self.checkpoint()
        ck.atomic_write_json(self.run_dir / "state.json", {k: v for k, v in self.state.items()
                                                          if k not in ("rng", "torch_rng")})
        if self.on_checkpoint is not None:
            self.on_checkpoint()


def load_adaptation_steps(run_dir: str | Path, tasks: tuple[str, ...], N: int = 5
                          ) -> list[dict[str, np.ndarray | str | int]]:
    """Per adaptation episode: task, episode, psi [T+1, N], labels [T+1, N], success."""
    out = []
    for task in tasks:
        buf = ReplayBuffer(Path(run_dir) / "replay" / "adapt" / task, N)
        buf.load_dir()
        for i, ep in enumerate(buf.episodes):
            out.append({"task": task, "episode": i, "psi": ep.extra["psi"], "labels": ep.labels(N),
                        "success": int(ep.t_success >= 0), "t_success": ep.t_success, "steps": ep.steps})
    return out


def read_state(run_dir: str | Path) -> dict[str, Any]:
    """The runner state of the last checkpoint of ``run_dir``."""
    doc = json.loads((Path(run_dir) / "ckpt" / "latest.json").read_text())
    return doc["meta"]
