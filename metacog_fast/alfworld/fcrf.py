"""FCRF pieces (paper 002): task difficulty, reflection intensity, the per-task-type lesson pool.

Difficulty 1-5 from the task type = (objects the task involves) + (operations beyond a single
pick-and-place) , clipped to 1..5:

| task type | objects | operations | difficulty |
|---|---|---|---|
| pick_and_place_simple | 1 (object) | 0 | 1 |
| look_at_obj_in_light | 2 (object, lamp) | 0 | 2 |
| pick_clean/heat/cool_then_place_in_recep | 2 (object, appliance) | 1 (clean/heat/cool) | 3 |
| pick_two_obj_and_place | 2 (two objects) | 2 (second search + second placement) | 4 |

Reflection intensity follows difficulty: up to ``EASY_MAX`` only the valuable-experience summary is
kept; above it the Mentor also picks a failure lesson from the pool (after a failure) and writes
a plan for the next attempt from both.
"""
from __future__ import annotations

from typing import Sequence

OBJECTS_OPERATIONS = {
    "pick_and_place_simple": (1, 0),
    "look_at_obj_in_light": (2, 0),
    "pick_clean_then_place_in_recep": (2, 1),
    "pick_heat_then_place_in_recep": (2, 1),
    "pick_cool_then_place_in_recep": (2, 1),
    "pick_two_obj_and_place": (2, 2),
}
EASY_MAX = 2
"""Difficulties up to this keep only the experience summary."""

INITIAL_LESSONS = {
    "pick_and_place_simple": [
        "Take the object first, then go to the target and move it there.",
        "Open a closed drawer or cabinet before looking inside it.",
    ],
    "look_at_obj_in_light": [
        "Hold the object, then go to the lamp and use it.",
        "Look for the lamp on desks, dressers and side tables.",
    ],
    "pick_clean_then_place_in_recep": [
        "Clean the object at the sinkbasin while holding it, then place it.",
        "Take the object before going to the sinkbasin.",
    ],
    "pick_heat_then_place_in_recep": [
        "Heat the object with the microwave while holding it, then place it.",
        "Take the object before going to the microwave.",
    ],
    "pick_cool_then_place_in_recep": [
        "Cool the object with the fridge while holding it, then place it.",
        "Take the object before going to the fridge.",
    ],
    "pick_two_obj_and_place": [
        "Place the first object before looking for the second; the robot holds one thing at a time.",
        "After placing the first object, search other places for the second one.",
    ],
}


def difficulty(task_type: str) -> int:
    """Difficulty 1-5 of a task type (table above)."""
    if task_type not in OBJECTS_OPERATIONS:
        raise ValueError(f"task_type: expected one of {sorted(OBJECTS_OPERATIONS)}, got {task_type!r}")
    objects, ops = OBJECTS_OPERATIONS[task_type]
    return max(1, min(5, objects + ops))


def deep_reflection(task_type: str) -> bool:
    """True when the Mentor extracts a lesson and constructs a plan (difficulty > EASY_MAX)."""
    return difficulty(task_type) > EASY_MAX


def _norm(text: str) -> str:
    return " ".join(text.lower().strip().rstrip(".").split())


class LessonPool:
    """Lessons per task type: the initial tips plus those learnt from fail -> success pairs."""

    def __init__(self, initial: dict[str, Sequence[str]] | None = None) -> None:
        src = INITIAL_LESSONS if initial is None else initial
        self.pools: dict[str, list[str]] = {t: list(v) for t, v in src.items()}

    def lessons(self, task_type: str) -> list[str]:
        return list(self.pools.get(task_type, []))

    def add(self, task_type: str, lesson: str) -> bool:
        """Add ``lesson`` unless empty or already present (case/space-insensitive). True if added."""
        if not isinstance(lesson, str) or not _norm(lesson):
            return False
        pool = self.pools.setdefault(task_type, [])
        if _norm(lesson) in {_norm(x) for x in pool}:
            return False
        pool.append(" ".join(lesson.split()))
        return True
