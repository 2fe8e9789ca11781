"""Trajectory records and the sub-task queue."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

FAILURE_OBS = ("nothing happens", "no known action", "i don't understand", "can't", "cannot", "not possible")


@dataclass
class Step:
    """One action of a sub-task."""

    action: str
    """The command (or ``access_guide <skill>`` / ``finish``)."""
    observation: str
    """What came back (for env actions the environment's text)."""
    kind: str = "env"
    """"env" (an environment action), "guide" (procedure fetched), "finish" (claim), "verify" (reflect's check)."""
    tip: str = ""
    """Tool memory's dynamic instruction shown with the observation (kept apart from the env's text)."""


@dataclass
class SubTask:
    """One item of the plan."""

    description: str
    """What to do."""
    goal: str
    """The state that shows it is done."""


@dataclass
class SubTaskResult:
    """How one sub-task went."""

    subtask: SubTask
    steps: list[Step]
    claimed: bool
    """The agent issued ``finish``."""
    capped: bool
    """The action cap was reached."""
    won: bool
    """The environment reported the whole task won during this sub-task."""
    flag: bool = False
    """The reflect agent's verdict."""
    report: str = ""
    """The reflect agent's checklist report."""
    retry: bool = False
    """This was the retry without procedural memory."""
    sop_used: str | None = None
    """Key of the SOP fetched or consulted, if any."""

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return d


def is_failure(observation: str) -> bool:
    o = observation.strip().lower()
    return any(o.startswith(f) for f in FAILURE_OBS)


def template(command: str) -> str:
    """Object numbers replaced by <n>: "take apple 1 from fridge 2" -> "take apple <n> from fridge <n>"."""
    return re.sub(r"\b\d+\b", "<n>", command.strip())


class SubTaskQueue:
    """The plan: a FIFO of sub-tasks that the planner may rewrite after every sub-task."""

    def __init__(self, items: list[SubTask], max_len: int) -> None:
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        self.max_len = max_len
        self.items: list[SubTask] = list(items)[:max_len]
        self.done: list[SubTask] = []
        self.replans = 0

    def __len__(self) -> int:
        return len(self.items)

    def pop(self) -> SubTask:
        if not self.items:
            raise IndexError("sub-task queue is empty")
        st = self.items.pop(0)
        self.done.append(st)
        return st

    def replace(self, items: list[SubTask]) -> bool:
        """Re-plan: the remaining queue becomes ``items`` (truncated). Returns True if it changed."""
        new = list(items)[: self.max_len]
        changed = [(s.description, s.goal) for s in new] != [(s.description, s.goal) for s in self.items]
        self.items = new
        self.replans += 1
        return changed
