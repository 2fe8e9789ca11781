"""Several learning runs (tasks x seeds) advanced one at a time, in rounds, in one process
(``metacog train learn-all``; ``metacog experiment run metaworld_learning`` runs it).

Round r trains every run up to ``min(r * stage_steps, env_steps)`` env steps, in order, before any
run goes further, so that at any moment all runs have curves of about the same length. A round is
a resumed :class:`~metacog_fast.metaworld.learn.run.LearnRunner` call per run: a killed schedule restarted
with the same arguments continues where every run's last checkpoint left it. One process keeps
one pid for the whole schedule (the benchmark protocol pauses it with SIGSTOP).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from metacog_fast.metaworld.learn.config import LEARN_SEEDS, LEARN_TASKS, LearnConfig

__all__ = ["LearnSchedule", "run_schedule"]


@dataclass
class LearnSchedule:
    """Which runs a schedule trains, and in which steps."""

    tasks: tuple[str, ...] = LEARN_TASKS
    """Meta-World tasks."""
    seeds: tuple[int, ...] = LEARN_SEEDS
    """Seeds of every task."""
    stage_steps: int = 10_000
    """Env steps every run advances per round."""
    run_root: str = "runs/metaworld/learn"
    """Run folders: <run_root>/<task>/seed<seed>."""
    out_root: str | None = "results/metaworld/learning/runs"
    """After each run's round, its curve.{json,csv} are copied to <out_root>/<task>/seed<seed>, with train_curve.csv (None: not)."""
    progress: bool = True
    """Progress bar of each run (with one worker; several workers print a line per run and round)."""
    workers: int = 1
    """Runs trained at once within a round, one process each (one per core: each run uses
    ``torch_threads`` threads, 1 by default). The curves do not depend on it (tested)."""

    def validate(self) -> "LearnSchedule":
        if not self.tasks:
            raise ValueError("tasks: expected at least one Meta-World task")
        if not self.seeds:
            raise ValueError("seeds: expected at least one seed")
        if self.stage_steps < 1:
            raise ValueError(f"stage_steps: expected a positive integer, got {self.stage_steps}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"workers: expected an int >= 1, got {self.workers!r}")
        return self


def _advance(c: LearnConfig, target: int, run_root: str, out_root: str | None, progress: bool) -> dict[str, Any]:
    """One run of a round: ``c`` trained (or resumed) to ``target`` env steps; its curves copied."""
    from metacog_fast._atomic import atomic_write_bytes
    from metacog_fast.metaworld.learn.records import write_curves
    from metacog_fast.metaworld.learn.run import LearnRunner

    run_dir = Path(run_root) / c.task / f"seed{c.seed}"
    state = LearnRunner(replace(c, env_steps=target), run_dir, progress=progress).run()
    if out_root:
        out = Path(out_root) / c.task / f"seed{c.seed}"
        write_curves(run_dir, out)
        atomic_write_bytes(out / "train_curve.csv", (run_dir / "train_curve.csv").read_bytes())
    print(f"round to {target}: {c.task} seed {c.seed} at {state['env_steps']} env steps, "
          f"{state['updates']} updates", flush=True)
    return state


def run_schedule(schedule: LearnSchedule, base: LearnConfig) -> list[dict[str, Any]]:
    """Train every (task, seed) of ``schedule`` to ``base.env_steps`` in rounds, ``schedule.workers``
    runs at a time (processes); returns the final states."""
    schedule.validate()
    cfgs = [replace(base, task=t, seed=s, model=replace(base.model)) for t in schedule.tasks for s in schedule.seeds]
    for c in cfgs:
        c.validate()
    states: list[dict[str, Any]] = [{} for _ in cfgs]
    targets = []
    target = 0
    while target < base.env_steps:
        target = min(target + schedule.stage_steps, base.env_steps)
        targets.append(target)
    if schedule.workers == 1:
        for target in targets:
            states = [_advance(c, target, schedule.run_root, schedule.out_root, schedule.progress) for c in cfgs]
        return states
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    # one pool for every round: a worker imports torch and Meta-World once, not once per round
    # (each round's runs resume from their run folders, so which worker trains a run does not matter)
    with ProcessPoolExecutor(max_workers=min(schedule.workers, len(cfgs)), mp_context=mp.get_context("spawn")) as ex:
        for target in targets:
            futs = [ex.submit(_advance, c, target, schedule.run_root, schedule.out_root, False) for c in cfgs]
            states = [f.result() for f in futs]
    return states
