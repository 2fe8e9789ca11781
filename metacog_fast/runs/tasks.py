"""What a task is and how a worker runs one.

A task function is a generator ``fn(payload, done, workdir)``: ``payload`` is the task's own
(picklable) argument, ``done`` the finished records of the task's episodes by key (so it can
rebuild cross-episode state and skip them), ``workdir`` an empty scratch folder holding the side
files the task asked for. It yields a :class:`Record` per finished episode and a
:class:`SideFile` for each side file the run folder should keep. Workers never write the run
folder: everything goes back to the driver, so no shared filesystem is needed.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Union


@dataclass(frozen=True)
class Record:
    """One finished episode: ``key`` is its record key, ``data`` its JSON-able record."""

    key: str
    data: Any


@dataclass(frozen=True)
class SideFile:
    """A file to keep in the run folder at ``path`` (relative), with its bytes."""

    path: str
    data: bytes

    @staticmethod
    def collect(workdir: str | Path, relpath: str) -> list["SideFile"]:
        """The file at ``workdir/relpath``, or every file under that folder."""
        root = Path(workdir)
        p = root / relpath
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else []
        return [SideFile(f.relative_to(root).as_posix(), f.read_bytes()) for f in files]


Item = Union[Record, SideFile]
TaskFn = Callable[[Any, Mapping[str, Any], Path], Iterator[Item]]


@dataclass(frozen=True)
class Task:
    """One unit of scheduling: an episode, or a group of episodes that share state."""

    key: str
    """Unique name of the task in its run."""
    payload: Any
    """The task function's own argument (picklable)."""
    records: tuple[str, ...]
    """Record keys of the episodes this task produces, in order."""
    inputs: tuple[str, ...] = field(default=())
    """Side files or folders (relative to the run folder) copied into the task's workdir."""


@dataclass(frozen=True)
class Job:
    """A task as sent to a worker: the function, its payload, the finished records and files."""

    key: str
    fn: TaskFn
    payload: Any
    done: Mapping[str, Any]
    files: Mapping[str, bytes]


def execute(job: Job) -> Iterator[Item]:
    """Run ``job`` in a fresh scratch workdir (removed afterwards) and yield its items."""
    workdir = Path(tempfile.mkdtemp(prefix="metacog-task-"))
    try:
        for rel, data in job.files.items():
            p = workdir / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        for item in job.fn(job.payload, job.done, workdir):
            if not isinstance(item, (Record, SideFile)):
                raise TypeError(f"task {job.key!r}: a task function yields Record or SideFile, got {type(item).__name__}")
            yield item
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
