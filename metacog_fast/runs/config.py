"""Where a run's episodes execute: the executor configuration every family's run function takes."""
from __future__ import annotations

from dataclasses import dataclass

LOCAL_EXECUTORS = ("local", "inline", "process")


@dataclass
class ExecutorConfig:
    """Where and how a run's tasks execute. Results never depend on it: a run started with one
    executor can be resumed with another."""

    executor: str = "local"
    """"local": in this process when there is one worker, else local worker processes (the
    families' behaviour before this harness); "inline": always in this process; "process": local
    worker processes (spawn); "ray": a Ray cluster on this machine (the one this process is
    connected to, else one found running, else a new one); "ray://host:port": the Ray client
    server of a remote cluster's head node."""
    workers: int | None = None
    """Tasks run at the same time: worker processes, or the CPUs of a new local Ray cluster.
    None: the family configuration's own ``workers``."""
    cpus_per_task: float = 1.0
    """Ray CPUs each task asks for (use the family's llama.cpp thread count)."""
    max_retries: int = 3
    """Times a task whose worker died is rerun, from the records written so far, before the run fails."""
    progress: bool = True
    """A progress bar on stderr (shown only when stderr is a terminal)."""

    def validate(self) -> "ExecutorConfig":
        if not isinstance(self.executor, str) or not (
                self.executor in LOCAL_EXECUTORS or self.executor == "ray" or self.executor.startswith("ray://")):
            raise ValueError(f"executor: expected one of {LOCAL_EXECUTORS}, 'ray' or 'ray://host:port', "
                             f"got {self.executor!r}")
        if self.executor.startswith("ray://") and ":" not in self.executor[len("ray://"):]:
            raise ValueError(f"executor: expected 'ray://host:port' (the client port, 10001 by default), "
                             f"got {self.executor!r}")
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise ValueError(f"workers: expected an int >= 1 or None, got {self.workers!r}")
        if not self.cpus_per_task > 0:
            raise ValueError(f"cpus_per_task: expected > 0, got {self.cpus_per_task!r}")
        if not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"max_retries: expected an int >= 0, got {self.max_retries!r}")
        return self

    def resolved_workers(self, family_workers: int = 1) -> int:
        """The number of parallel tasks: ``workers``, else the family's own setting."""
        return self.workers if self.workers is not None else max(1, int(family_workers))

    @property
    def uses_ray(self) -> bool:
        return self.executor == "ray" or self.executor.startswith("ray://")
