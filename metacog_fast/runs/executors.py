"""Executors: run a batch of jobs and hand every item they yield to the driver as it comes.

``run(jobs, on_item)`` returns the keys of the jobs whose worker died (the harness reruns them
from the records written so far); an exception raised by a task's own code propagates.
"""
from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Protocol, Sequence

from metacog_fast.runs.tasks import Item, Job, execute

OnItem = Callable[[str, Item], None]


class Executor(Protocol):
    name: str

    def run(self, jobs: Sequence[Job], on_item: OnItem) -> set[str]:
        """Run ``jobs``; call ``on_item(job_key, item)`` on the driver for each item; return the
        keys of jobs whose worker died."""
        ...

    def close(self) -> None:
        ...


class InlineExecutor:
    """Jobs one after another in this process."""

    name = "inline"

    def run(self, jobs: Sequence[Job], on_item: OnItem) -> set[str]:
        for job in jobs:
            for item in execute(job):
                on_item(job.key, item)
        return set()

    def close(self) -> None:
        pass


def _process_job(items: Any, job: Job) -> int:
    """In a worker process: run ``job``, putting each item on the manager queue (a synchronous
    put, so every item is on the queue before the job's result reaches the driver)."""
    n = 0
    for item in execute(job):
        items.put((job.key, item))
        n += 1
    return n


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop this pool's worker processes."""
    for p in list(getattr(pool, "_processes", {}).values()):
        p.terminate()


class ProcessExecutor:
    """Jobs on ``workers`` local processes (spawn context: each worker imports afresh, so an
    LLM or JVM opened in one never leaks into another)."""

    name = "process"

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers: expected >= 1, got {workers}")
        self.workers = workers
        self._ctx = mp.get_context("spawn")
        self._manager: Any = None

    def run(self, jobs: Sequence[Job], on_item: OnItem) -> set[str]:
        if not jobs:
            return set()
        if self._manager is None:
            self._manager = self._ctx.Manager()
        items = self._manager.Queue()
        died: set[str] = set()

        def drain(block: bool) -> None:
            while True:
                try:
                    key, item = items.get(timeout=0.2) if block else items.get_nowait()
                except queue_mod.Empty:
                    return
                on_item(key, item)
                block = False

        pool = ProcessPoolExecutor(max_workers=min(self.workers, len(jobs)), mp_context=self._ctx)
        try:
            futures = {pool.submit(_process_job, items, job): job.key for job in jobs}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                drain(block=not done)
                for fut in done:
                    drain(block=False)
                    exc = fut.exception()
                    if isinstance(exc, BrokenProcessPool):
                        died.add(futures[fut])
                    elif exc is not None:
                        raise exc
            drain(block=False)
        except BaseException:  # a task failed or the driver was interrupted: stop, do not wait for the others
            _terminate(pool)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return died

    def close(self) -> None:
        if self._manager is not None:
            self._manager.shutdown()
            self._manager = None


def make_executor(executor: str, workers: int, cpus_per_task: float = 1.0) -> Executor:
    """The executor named by ``ExecutorConfig.executor`` (Ray imported only when named)."""
    if executor == "inline" or (executor == "local" and workers == 1):
        return InlineExecutor()
    if executor in ("local", "process"):
        return ProcessExecutor(workers)
    if executor == "ray" or executor.startswith("ray://"):
        from metacog_fast.runs.ray_executor import RayExecutor

        return RayExecutor(executor, workers, cpus_per_task)
    raise ValueError(f"executor: expected 'local', 'inline', 'process', 'ray' or 'ray://host:port', got {executor!r}")
