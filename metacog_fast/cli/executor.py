"""The executor flags the run commands share (:class:`metacog_fast.runs.ExecutorConfig`):
``--executor local|inline|process|ray|ray://host:port``, ``--cpus-per-task``, ``--max-retries``,
``--progress/--no-progress``. ``--workers`` stays the family configuration's field (the executor
uses it), so the command line has one ``--workers``."""
from __future__ import annotations

from metacog_fast.cli.dataclass_args import Flags
from metacog_fast.runs.config import ExecutorConfig

EXECUTOR_FLAGS = Flags(ExecutorConfig, skip=("workers",))
"""Add to a run command's flags; ``config_from_args(EXECUTOR_FLAGS, args)`` -> the ExecutorConfig."""
