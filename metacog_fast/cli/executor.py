"""The executor flags the run commands share (views of :class:`metacog_fast.runs.ExecutorConfig`):
``--executor local|inline|process|ray|ray://host:port``, ``--cpus-per-task``, ``--max-retries``,
``--progress/--no-progress``, and ``--workers``: the family configuration's field where it has one
(ALFWorld, ScienceWorld: the executor uses it), else the executor's (``learn``, ``sim ablate``), so
a command line has one ``--workers``."""
from __future__ import annotations

from metacog_fast.cli.dataclass_args import view
from metacog_fast.runs.config import ExecutorConfig

ExecutorFlags = view(ExecutorConfig, skip=("workers",))
"""For a run command whose family configuration has ``workers``."""
ExecutorWorkersFlags = view(ExecutorConfig)
"""For a run command whose family configuration has no ``workers`` (the executor's own then)."""
