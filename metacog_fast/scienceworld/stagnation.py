"""SRM stagnation signals over the recent trajectory (pure functions on crafted or real steps)."""
from __future__ import annotations

from dataclasses import dataclass

from metacog_fast.scienceworld.text import verb

MOVE_VERBS = frozenset({"go to", "teleport to", "open", "close"})


@dataclass(frozen=True)
class Step:
    """One executed step as the detectors see it."""

    action: str
    observation: str
    delta: float
    """Score change of the step."""
    room: str | None = None
    """Room after the step (None when the observation does not say)."""


def repeated_observation(traj: list[Step], window: int = 6, times: int = 3) -> bool:
    """The same observation came back ``times`` times within the last ``window`` steps."""
    recent = [s.observation.strip() for s in traj[-window:]]
    return any(recent.count(o) >= times for o in set(recent))


def repeated_ineffective_action(traj: list[Step], window: int = 6, times: int = 2) -> bool:
    """One action executed ``times`` times in the window, none of them raising the score."""
    recent = traj[-window:]
    counts: dict[str, int] = {}
    for s in recent:
        if s.delta <= 0:
            counts[s.action] = counts.get(s.action, 0) + 1
    return any(c >= times for c in counts.values())


def repeated_ineffective_verb(traj: list[Step], run: int = 4) -> bool:
    """The last ``run`` steps share one verb and none raised the score."""
    if len(traj) < run:
        return False
    last = traj[-run:]
    return len({verb(s.action) for s in last}) == 1 and all(s.delta <= 0 for s in last)


def movement_without_new_states(traj: list[Step], run: int = 4) -> bool:
    """The last ``run`` steps were all movements, without progress and without reaching a room
    not seen earlier in the episode."""
    if len(traj) < run:
        return False
    last = traj[-run:]
    if not all(verb(s.action) in MOVE_VERBS for s in last) or any(s.delta > 0 for s in last):
        return False
    seen_before = {s.room for s in traj[:-run] if s.room}
    new_rooms = {s.room for s in last if s.room} - seen_before
    return not new_rooms


def stagnation_signals(traj: list[Step], window: int = 6) -> list[str]:
    """Names of the detectors that fire on ``traj`` (empty list = no stagnation)."""
    out = []
    if repeated_observation(traj, window):
        out.append("repeated_observation")
    if repeated_ineffective_action(traj, window):
        out.append("repeated_action")
    if repeated_ineffective_verb(traj):
        out.append("repeated_verb")
    if movement_without_new_states(traj):
        out.append("movement_without_new_states")
    return out
