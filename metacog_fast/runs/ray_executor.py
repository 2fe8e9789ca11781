"""Jobs as Ray tasks: one streaming-generator task per job, so each finished episode's record
travels back to the driver as soon as it is yielded (the run folder stays on the driver).

Ray's own task retries are off: a retried generator would replay episodes from its original
inputs. Instead a job whose worker (or node) died is reported to the harness, which resubmits
it with the records written since. This module is the only one that imports ray.
"""
from __future__ import annotations

from typing import Any, Sequence

from metacog_fast._extras import require
from metacog_fast.runs.executors import OnItem
from metacog_fast.runs.tasks import Item, Job, execute


def _ray_job(job: Job) -> Any:
    yield from execute(job)


def start_local_cluster(workers: int) -> None:
    """A new single-machine Ray cluster with ``workers`` CPUs on 127.0.0.1, its workers at the
    driver's priority. Ray starts workers at nice 15 by default, so that its own daemons stay
    responsive; here the workers do all the work while the driver waits, and at nice 15 any other
    process on the machine starves them (ALFWorld on Ray with one busy process beside it: 42 s ->
    382 s, docs/runs.md)."""
    import ray

    ray.init(address="local", num_cpus=workers, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, _system_config={"worker_niceness": 0})


class RayExecutor:
    """``address``: "ray" (a local cluster: the connected one, else one running here, else a new
    one with ``workers`` CPUs on 127.0.0.1) or "ray://host:port" (a remote client server)."""

    name = "ray"

    def __init__(self, address: str, workers: int, cpus_per_task: float = 1.0) -> None:
        ray = require("ray", "ray", "the Ray executor (--executor ray)")

        self._ray = ray
        self.address = address
        self.cpus_per_task = cpus_per_task
        self._started = False
        if not ray.is_initialized():
            if address.startswith("ray://"):
                ray.init(address=address, log_to_driver=False)
            else:
                try:
                    ray.init(address="auto", log_to_driver=False)
                except ConnectionError:
                    start_local_cluster(workers)
            self._started = True
        self._remote = ray.remote(num_returns="streaming", max_retries=0, num_cpus=cpus_per_task)(_ray_job)

    def run(self, jobs: Sequence[Job], on_item: OnItem) -> set[str]:
        ray = self._ray
        from ray.exceptions import (LocalRayletDiedError, NodeDiedError, ObjectLostError, RayTaskError,
                                    WorkerCrashedError)

        lost = (WorkerCrashedError, NodeDiedError, LocalRayletDiedError, ObjectLostError)
        gens = {}
        for job in jobs:
            gens[self._remote.remote(job)] = job.key
        pending = list(gens)
        died: set[str] = set()
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=1.0)
                for gen in ready:
                    key = gens[gen]
                    try:
                        ref = next(gen)
                    except StopIteration:
                        continue
                    except lost:
                        died.add(key)
                        continue
                    try:
                        item: Item = ray.get(ref)
                    except lost:
                        died.add(key)
                        continue
                    except RayTaskError as exc:
                        raise exc.as_instanceof_cause() from None
                    on_item(key, item)
                    pending.append(gen)
        except BaseException:
            for gen in pending:
                try:
                    ray.cancel(gen, force=True)
                except Exception:  # already finished or its worker gone
                    pass
            raise
        return died

    def close(self) -> None:
        if self._started and self._ray.is_initialized():
            self._ray.shutdown()
