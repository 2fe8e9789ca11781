"""One run harness for every agent family: a run folder on the driver (configuration snapshot,
atomic per-episode records, side files), resume, a progress bar, and executors (in-process,
local processes, Ray) behind one interface. See docs/runs.md.

Importing this package never imports ray (only ``ExecutorConfig(executor="ray")`` does).
"""
from metacog_fast.runs.config import ExecutorConfig
from metacog_fast.runs.folder import RunFolder, RunFolderMismatch, config_differences
from metacog_fast.runs.harness import RunSummary, run_tasks
from metacog_fast.runs.records import read_json, write_json_atomic
from metacog_fast.runs.tasks import Record, SideFile, Task

__all__ = ["ExecutorConfig", "Record", "RunFolder", "RunFolderMismatch", "RunSummary", "SideFile", "Task", "config_differences",
           "read_json", "run_tasks", "write_json_atomic"]
