"""The run loop every family uses: skip finished episodes, send the rest to an executor, write
each record the moment it comes back, rerun tasks whose worker died.

Guarantees (tests/test_runs_*.py): an episode whose record exists is never played again and
never counted twice; a record is written once, whole, by the driver; a task whose worker dies
is resubmitted with the records written so far, so its finished episodes are kept and the
interrupted one is played again.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from metacog_fast.runs.config import ExecutorConfig
from metacog_fast.runs.executors import make_executor
from metacog_fast.runs.folder import RunFolder
from metacog_fast.runs.tasks import Item, Job, Record, SideFile, Task, TaskFn


@dataclass
class RunSummary:
    """What one call of :func:`run_tasks` did."""

    played: int = 0
    """Records written by this call (episodes played to the end)."""
    already_done: int = 0
    """Records that existed when the call started (skipped)."""
    duplicates: int = 0
    """Records received for an episode already written (discarded, not counted)."""
    reruns: int = 0
    """Task submissions after a worker died."""
    executor: str = "inline"
    """The executor that ran the tasks."""
    wall_seconds: float = 0.0
    """Wall-clock time of the call."""
    played_by_task: dict[str, int] = field(default_factory=dict)
    """Records written per task key."""

    def as_dict(self) -> dict[str, Any]:
        return {"played": self.played, "already_done": self.already_done, "duplicates": self.duplicates,
                "reruns": self.reruns, "executor": self.executor, "wall_seconds": self.wall_seconds,
                "played_by_task": dict(self.played_by_task)}


def _progress_bar(total: int, initial: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="ep", dynamic_ncols=True, file=sys.stderr,
                disable=None)  # None: hidden when stderr is not a terminal


def run_tasks(folder: RunFolder, tasks: Sequence[Task], fn: TaskFn, executor: ExecutorConfig | None = None,
              family_workers: int = 1, desc: str = "",
              on_record: Callable[[str, Any], None] | None = None) -> RunSummary:
    """Play every unfinished episode of ``tasks`` (``fn`` is the task function, see
    ``metacog_fast.runs.tasks``) into ``folder``. ``family_workers``: the family config's worker
    count, used when ``executor.workers`` is None. ``on_record(key, record)`` is called on the
    driver after each record is written."""
    ex_cfg = (executor or ExecutorConfig()).validate()
    keys = [k for t in tasks for k in t.records]
    if len(set(keys)) != len(keys):
        raise ValueError("tasks: two tasks name the same record key")
    if len({t.key for t in tasks}) != len(tasks):
        raise ValueError("tasks: task keys must be unique")
    t0 = time.perf_counter()
    summary = RunSummary()
    summary.already_done = sum(folder.has(k) for k in keys)
    todo = [t for t in tasks if not all(folder.has(k) for k in t.records)]
    by_key = {t.key: t for t in todo}
    attempts = {t.key: 0 for t in todo}
    bar = _progress_bar(len(keys), summary.already_done, desc, ex_cfg.progress)

    def on_item(task_key: str, item: Item) -> None:
        if isinstance(item, SideFile):
            folder.write_side_file(item.path, item.data)
            return
        if item.key not in by_key[task_key].records:
            raise ValueError(f"task {task_key!r} yielded record {item.key!r}, which is not one of its records")
        if folder.write(item.key, item.data):
            summary.played += 1
            summary.played_by_task[task_key] = summary.played_by_task.get(task_key, 0) + 1
            if bar is not None:
                bar.update(1)
            if on_record is not None:
                on_record(item.key, item.data)
        else:
            summary.duplicates += 1

    def job(t: Task) -> Job:
        return Job(t.key, fn, t.payload, folder.finished(t.records), folder.read_side_files(t.inputs))

    workers = ex_cfg.resolved_workers(family_workers)
    runner = make_executor(ex_cfg.executor, min(workers, max(1, len(todo))), ex_cfg.cpus_per_task) if todo else None
    summary.executor = runner.name if runner is not None else "none"
    try:
        batch = todo
        while batch:
            died = runner.run([job(t) for t in batch], on_item)
            batch = []
            for k in sorted(died):
                if all(folder.has(r) for r in by_key[k].records):
                    continue  # its worker died after the last record came back
                attempts[k] += 1
                if attempts[k] > ex_cfg.max_retries:
                    raise RuntimeError(f"task {k!r}: its worker died {attempts[k]} times "
                                       f"(max_retries={ex_cfg.max_retries}); the records written so far are kept")
                summary.reruns += 1
                batch.append(by_key[k])
    finally:
        if runner is not None:
            runner.close()
        if bar is not None:
            bar.close()
    summary.wall_seconds = time.perf_counter() - t0
    return summary


__all__ = ["Record", "RunSummary", "SideFile", "Task", "run_tasks"]
