"""Valid-action grounding and SRM Gate-1.

Grounding maps a text action onto the current valid set (``get_valid_action_object_combinations``
plus the simulator's always-valid verbs) with deterministic repairs of minor mismatches:
case, punctuation, articles, ``teleport to``/``go to``, ``<room> door``/``door to <room>``,
a trailing ``in <current room>``, and a close spelling of the same verb. Anything else is
not repairable and Gate-1 drops it.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from metacog_fast.scienceworld.text import verb

# Commands the simulator accepts in every state but does not list among the combinations.
ALWAYS_VALID = ("look around", "inventory", "task", "wait", "wait1")
_PUNCT = re.compile(r"[^a-z0-9 ]+")
_ARTICLES = re.compile(r"\b(the|a|an)\b")


def normalise(action: str) -> str:
    """Lower case, no punctuation or articles, single spaces."""
    s = _PUNCT.sub(" ", action.lower())
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


@dataclass(frozen=True)
class Grounded:
    """Outcome of grounding one action."""

    action: str | None
    """The valid action to execute, or None (drop)."""
    status: str
    """"valid" (as given), "repaired" (minor mismatch fixed) or "dropped"."""
    rule: str = ""
    """Which repair applied (empty for valid/dropped)."""


class ValidSet:
    """The valid actions of one state with a normalised lookup. ``actions``: list[str]."""

    def __init__(self, actions: list[str], room: str | None = None) -> None:
        self.actions = list(actions)
        self.room = room
        self.exact = set(self.actions) | set(ALWAYS_VALID)
        self._norm: dict[str, str] | None = None  # built on the first repair only (thousands of actions)
        self._by_verb: dict[str, list[str]] | None = None

    @property
    def norm(self) -> dict[str, str]:
        """normalised action -> valid action."""
        if self._norm is None:
            self._norm = {}
            for a in list(self.actions) + list(ALWAYS_VALID):
                self._norm.setdefault(normalise(a), a)
        return self._norm

    def by_verb(self, v: str) -> list[str]:
        if self._by_verb is None:
            self._by_verb = {}
            for n in self.norm:
                self._by_verb.setdefault(verb(n), []).append(n)
        return self._by_verb.get(v, [])

    def __contains__(self, action: str) -> bool:
        return action in self.exact


def _aliases(n: str, room: str | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if n.startswith("teleport to "):
        out.append(("go to " + n[len("teleport to "):], "teleport->go"))
    if n.startswith("go to "):
        out.append(("teleport to " + n[len("go to "):], "go->teleport"))
        if n.endswith(" door"):
            out.append((n[: -len(" door")], "room door->room"))
    m = re.match(r"^(open|close) (.+) door$", n)
    if m:
        out.append((f"{m.group(1)} door to {m.group(2)}", "room door->door to room"))
    m = re.match(r"^(.+) in ([a-z ]+)$", n)
    if m and (room is None or m.group(2) == room):
        out.append((m.group(1), "strip in <room>"))
    return out


def ground(action: str, valid: ValidSet, cutoff: float = 0.85) -> Grounded:
    """Map ``action`` onto ``valid``: exact, repaired, or dropped (see module doc)."""
    if not isinstance(action, str) or not action.strip():
        return Grounded(None, "dropped", "empty")
    if action in valid:
        return Grounded(action, "valid")
    n = normalise(action)
    if n in valid.norm:
        return Grounded(valid.norm[n], "repaired", "normalise")
    for alias, rule in _aliases(n, valid.room):
        if alias in valid.norm:
            return Grounded(valid.norm[alias], "repaired", rule)
    close = difflib.get_close_matches(n, valid.by_verb(verb(n)), n=1, cutoff=cutoff)
    if close:
        return Grounded(valid.norm[close[0]], "repaired", "spelling")
    return Grounded(None, "dropped", "not admissible")


@dataclass
class Gate1Stats:
    """Gate-1 counters of one episode."""

    checked: int = 0
    passed: int = 0
    repaired: int = 0
    dropped: int = 0


class Gate1:
    """SRM Gate-1: every action about to reach the environment is checked against the current
    valid set; minor mismatches are repaired, the rest dropped (and counted)."""

    def __init__(self, cutoff: float = 0.85) -> None:
        self.cutoff = cutoff
        self.stats = Gate1Stats()

    def __call__(self, action: str, valid: ValidSet) -> Grounded:
        g = ground(action, valid, self.cutoff)
        self.stats.checked += 1
        if g.status == "valid":
            self.stats.passed += 1
        elif g.status == "repaired":
            self.stats.repaired += 1
        else:
            self.stats.dropped += 1
        return g
