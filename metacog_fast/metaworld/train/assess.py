"""The SA head of MUSE checkpoints on the same scripted-policy episodes (``metacog train assess``):
metacognitive accuracy, AUROC2 and the Type-2 ROC plot, plus what each checkpoint holds."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class AssessConfig:
    """Which checkpoints are assessed, on which tasks and episodes, and where the result goes."""

    checkpoint: tuple[str, ...]
    """MUSE checkpoint stem(s) (e.g. RUN/pretrained RUN/ckpt/latest), assessed on the same episodes."""
    out: str
    """Result JSON."""
    names: tuple[str, ...] | None = None
    """A name per checkpoint (None: the stem's file name)."""
    tasks: str = "novel"
    """novel (the profile's novel tasks, zero task embedding), known (MT10), or a comma list."""
    novel: bool = False
    """Zero task embedding for a comma list of tasks."""
    episodes_per_task: int = 20
    """Scripted episodes per task."""
    seed: int = 12345
    """Held-out layouts and noise (the same for every checkpoint)."""
    backend: str = "auto"
    """Acting kernel backend (auto, cpu, torch, ...)."""
    threads: int = 1
    """torch and core threads."""
    roc: str | None = None
    """Type-2 ROC PNG, one curve per checkpoint with a defined AUROC2 (None: no plot)."""

    def stems(self) -> list[Path]:
        return [Path(c).with_suffix("") if Path(c).suffix in (".json", ".safetensors") else Path(c)
                for c in self.checkpoint]

    def labels(self) -> list[str]:
        return list(self.names) if self.names else [s.name for s in self.stems()]

    def task_list(self) -> tuple[str, ...]:
        return tuple(t.strip() for t in self.tasks.split(",") if t.strip())

    def validate(self) -> "AssessConfig":
        if not self.checkpoint:
            raise ValueError("checkpoint: expected at least one checkpoint stem")
        names = self.labels()
        if len(names) != len(self.checkpoint) or len(set(names)) != len(names):
            raise ValueError(f"names: expected {len(self.checkpoint)} distinct names (one per checkpoint), got {names}")
        if self.tasks not in ("novel", "known") and not self.task_list():
            raise ValueError(f"tasks: expected novel, known or a comma list, got {self.tasks!r}")
        if self.episodes_per_task < 1:
            raise ValueError(f"episodes_per_task: expected >= 1, got {self.episodes_per_task}")
        return self


def checkpoint_state(stem: str | Path) -> dict[str, Any]:
    """What a checkpoint holds: its phase, updates and, for a runner checkpoint written during or
    after adaptation, the novel task whose adaptation its weights carry (each novel task restarts
    from the pre-trained weights, so a ``latest`` checkpoint holds only the last task's)."""
    from metacog_fast.metaworld.train.checkpoint import read_config

    cfg, doc = read_config(stem)
    meta = doc.get("meta", {})
    out: dict[str, Any] = {"checkpoint": str(stem), "agent": cfg.agent, "profile": cfg.profile,
                           "phase": meta.get("phase") or ("pretrained" if "pretrain_replay" in meta else None),
                           "updates": meta.get("updates")}
    ad = meta.get("adapt")
    if ad is not None and meta.get("phase") in ("adapt", "done"):
        ti, ep = int(ad["task_index"]), int(ad["episode"])
        if ep == 0 and ti > 0:
            ti, ep = ti - 1, cfg.adapt_episodes
        if ep > 0:
            out["adapted_task"] = cfg.novel_tasks[ti]
            out["adapted_episodes"] = ep
            out["adapted_updates"] = ep * cfg.adapt_updates_per_episode
    return out


def assess_checkpoints(cfg: AssessConfig) -> dict[str, Any]:
    """The SA head of each checkpoint on the same scripted episodes of ``cfg.tasks`` (same seed:
    same layouts and actions); writes ``cfg.out`` = {"checkpoints": {name: result}, ...} and ``cfg.roc``."""
    from metacog_fast.metrics import plot_type2_roc_curves
    from metacog_fast.metaworld.train.checkpoint import atomic_write_json, read_config
    from metacog_fast.metaworld.train.report import assess_on_scripted
    from metacog_fast.metaworld.train.runner import set_threads

    cfg.validate()
    set_threads(cfg.threads)
    stems, names = cfg.stems(), cfg.labels()
    saved = [read_config(s)[0] for s in stems]
    for s, c in zip(stems, saved):
        if not c.model.muse:
            raise ValueError(f"checkpoint: {s} is a {c.agent} checkpoint without a trained SA head")
    if cfg.tasks == "novel":
        tasks, novel = tuple(saved[0].novel_tasks), True
    elif cfg.tasks == "known":
        tasks, novel = tuple(saved[0].train_tasks), False
    else:
        tasks, novel = cfg.task_list(), cfg.novel
    results: dict[str, Any] = {}
    curves = {}
    for name, stem in zip(names, stems):
        t0 = time.perf_counter()
        res = assess_on_scripted(stem, tasks, episodes_per_task=cfg.episodes_per_task, seed=cfg.seed,
                                 backend=cfg.backend, novel=novel, keep_signal=True)
        signal = res.pop("_signal")
        if 0 < signal[1].sum() < signal[1].size:  # both outcomes: a curve exists (AUROC2 may be undefined)
            curves[name] = signal
        res["wall_seconds"] = time.perf_counter() - t0
        res["checkpoint_state"] = checkpoint_state(stem)
        results[name] = res
        print(f"{name}: {len(tasks)} tasks x {cfg.episodes_per_task} episodes ({res['successful_episodes']} successful): "
              f"metacognitive accuracy {res['metacognitive_accuracy']:.3f} (always-failure "
              f"{res['always_failure_accuracy']:.3f}), AUROC2 {res['auroc2']:.3f}"
              f"{' (' + res['auroc2_note'] + ')' if 'auroc2_note' in res else ''}")
    doc = {"checkpoints": results, "tasks": list(tasks), "novel": novel, "seed": cfg.seed,
           "episodes_per_task": cfg.episodes_per_task, "threads": cfg.threads}
    atomic_write_json(cfg.out, doc)
    if cfg.roc and curves:
        plot_type2_roc_curves(curves, cfg.roc, title=f"Type-2 ROC, {'novel' if novel else 'known'} tasks (scripted)",
                              results={n: results[n].get("auroc2_ci") for n in curves})
    return doc
