"""Action guards of the episode loop: a loop guard and a focus guard (SwiftSage-style).

* **Loop guard.** A strictly periodic tail of the executed steps (the last ``repeats`` x ``p``
  steps are ``repeats`` copies of one block of ``p``) is a loop; every action of the
  repeated block is masked for the next choice, so the agent has to do something else once.
* **Focus guard.** In ScienceWorld ``focus on X`` is irreversible and focusing on the wrong object
  ends the episode with -100. ``focus on X`` is allowed only where X is the task's target as the
  task description names it (:class:`FocusGuard`); everything else that starts with ``focus on``
  is masked. Where the description names only a category ("focus on the animal ..."), the guard
  cannot judge and lets any object through.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from metacog_fast.scienceworld.text import tokens

FOCUS = "focus on "
CATEGORY_TARGETS = frozenset({"thing", "animal", "plant", "object", "item", "seed", "organism", "living", "life",
                              "stage", "stages", "creature"})
"""Words of a focus instruction that name a category the guard cannot judge ("focus on the
plant", "focus on the animal with the longest life span"): any object may be the target."""
GENERIC_TARGETS = CATEGORY_TARGETS | {"substance", "non", "it", "unknown"}
"""Words of a focus instruction that name no particular object."""
_FOCUS_INSTR = re.compile(r"focus on (?:the |a |an )?([a-z0-9 \-()]+?)(?:[.,;]| then | and | with | that | which |$)")
_HEAD_END = re.compile(r" (?:in|on|containing|from|into|with) ")


def periodic_loop(actions: list[Any], max_period: int = 6, repeats: int = 2, min_length: int = 2) -> int:
    """The shortest period ``p`` (1..``max_period``) such that the last ``max(repeats*p, min_length)``
    actions repeat one block of ``p`` actions; 0 when the tail is not periodic.

    ``actions``: executed actions (or (action, observation) pairs), oldest first. ``min_length``
    keeps a short period from counting before it has run ``min_length`` steps (2: the same step
    twice in a row is already a loop)."""
    n = len(actions)
    for p in range(1, max_period + 1):
        span = max(repeats * p, min_length)
        if span > n:
            break
        tail = actions[n - span:]
        if all(tail[i] == tail[i - p] for i in range(p, span)):
            return p
    return 0


def loop_mask(actions: list[str], max_period: int = 6, repeats: int = 2, min_length: int = 2) -> set[str]:
    """Actions to mask for the next choice: every action of a detected loop's block (empty: no loop)."""
    p = periodic_loop(actions, max_period, repeats, min_length)
    return set(actions[-p:]) if p else set()


WAIT_ACTIONS = frozenset({"wait", "wait1"})
"""Actions after which the world moves on even when the observation text does not (a plant grows)."""


def loop_guard_mask(steps: list[Any], actions: list[str], max_period: int = 6, repeats: int = 2,
                    min_length: int = 2, wait_run: int = 10) -> tuple[int, set[str]]:
    """(period, actions to mask) of the loop guard. ``steps``: what periodicity is tested on
    (actions or (action, observation) pairs), ``actions``: the executed actions. A run of one
    waiting action is a loop only from ``wait_run`` in a row: the gold paths wait up to 10 times
    running while something grows, with the same text each time. Waiting inside a longer loop
    (``look around``, ``wait1``, ...) is masked with the rest."""
    p = periodic_loop(steps, max_period, repeats, min_length)
    if not p:
        return 0, set()
    mask = set(actions[-p:])
    if p == 1 and mask <= WAIT_ACTIONS and (len(actions) < wait_run or len(set(actions[-wait_run:])) > 1):
        return p, set()  # a run of waiting shorter than wait_run
    return p, mask


def focus_head(action: str) -> set[str]:
    """Content words of the focused object's head: ``focus on substance in metal pot`` -> {substance}."""
    obj = action.strip().lower()[len(FOCUS):]
    return set(tokens(_HEAD_END.split(" " + obj + " ", maxsplit=1)[0]))


@dataclass(frozen=True)
class FocusTargets:
    """What a task description says to focus on."""

    words: frozenset[str]
    """Content words of the objects named in its "focus on X" instructions (generic words too)."""
    category: bool
    """An instruction names a category (any object may be the target)."""
    generic: bool
    """An instruction names a generic target ("the substance"): the task's own words count as targets."""
    instructed: bool
    """The description has a "focus on" instruction at all."""


def focus_targets(task: str) -> FocusTargets:
    """Parse the focus instructions of task description ``task``."""
    low = task.lower()
    words: set[str] = set()
    category = generic = False
    found = _FOCUS_INSTR.findall(low)
    for obj in found:
        ws = set(tokens(obj))
        if ws & CATEGORY_TARGETS:  # "the thing", "the life stages of the apple plant"
            category = True
        if ws & GENERIC_TARGETS:
            generic = True
        words |= ws
    return FocusTargets(frozenset(words), category, generic, bool(found))


@dataclass
class FocusGuard:
    """Decides whether ``focus on X`` may be executed in one episode's task.

    Allowed: X's head words are all among the instruction's target words; or some are and the rest
    are words of the task description ("inclined plane b" where the task lists planes "(C, B)"); or
    the instruction is generic ("the substance") and they are all words of the task description; or
    an instruction names a category ("the thing", "the life stages of ..."); or the description has
    no instruction and they are words of it. A focus already executed is never allowed again."""

    task: str

    def __post_init__(self) -> None:
        self.targets = focus_targets(self.task)
        self.task_words = set(tokens(self.task.lower()))
        self.focused: set[str] = set()

    def allowed(self, action: str) -> bool:
        """True for every non-focus action; for ``focus on X``, whether X is the task's target."""
        a = action.strip().lower()
        if not a.startswith(FOCUS):
            return True
        if a in self.focused:
            return False
        head = focus_head(a)
        if not head:
            return False
        t = self.targets
        if head <= t.words or t.category:
            return True
        if head & t.words and head <= t.words | self.task_words:  # "inclined plane b" of planes "(C, B)"
            return True
        if (t.generic or not t.instructed) and head <= self.task_words:
            return True
        return False

    def executed(self, action: str) -> None:
        """Record an executed action (a focus is never repeated)."""
        a = action.strip().lower()
        if a.startswith(FOCUS):
            self.focused.add(a)


__all__ = ["WAIT_ACTIONS", "FocusGuard", "FocusTargets", "focus_head", "focus_targets", "loop_guard_mask", "loop_mask",
           "periodic_loop"]
