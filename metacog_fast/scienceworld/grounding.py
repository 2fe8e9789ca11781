"""Valid-action grounding and SRM Gate-1.

Grounding maps a text action onto the current valid set (``get_valid_action_object_combinations``
plus the simulator's always-valid verbs) with deterministic repairs of minor mismatches:
case, punctuation, articles, ``teleport to``/``go to``, ``<room> door``/``door to <room>`` (both
ways), a trailing ``in <current room>``, ``in inventory`` after an object, the letter of an unknown
substance (``unknown substance B``), a life stage (``in the seedling stage``), a ``containing ...``
clause of a container, ``examine X`` /
``look at X``, and a close spelling of the same verb. Anything else is not repairable and Gate-1
drops it.

The same rules give the **executable form** of a gold step (:func:`executable_form`): the gold
paths write ``open door to hallway`` or ``use thermometer in inventory on substance in metal pot``
where the valid list has ``open hallway door`` / ``use thermometer on substance in metal pot``;
without the mapping such steps fall out of training and the agent never learns them.
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


_INV = re.compile(r" in inventory\b")
_LETTER = re.compile(r"\b(unknown substance) [a-z]\b")
_CONTAINING = re.compile(r" containing .*?(?= in | on | to | into |$)")
_STAGE = re.compile(r" in (?:the )?[a-z]+ stage\b")


def _object_forms(n: str) -> list[tuple[str, str]]:
    """Rewrites of the object phrases of normalised action ``n`` (in order of preference)."""
    out: list[tuple[str, str]] = []
    cur = n
    for pat, rule in ((_INV, "strip in inventory"), (_LETTER, "substance letter"), (_STAGE, "strip life stage"),
                      (_CONTAINING, "strip containing")):
        new = pat.sub(r"\1", cur) if rule == "substance letter" else pat.sub("", cur)
        new = " ".join(new.split())
        if new != cur:
            out.append((new, rule))
            cur = new
    return out


def _aliases(n: str, room: str | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if n.startswith("examine "):
        out.append(("look at " + n[len("examine "):], "examine->look at"))
    m = re.match(r"^(open|close) door to (.+)$", n)
    if m:
        out.append((f"{m.group(1)} {m.group(2)} door", "door to room->room door"))
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
    for form, rule in _object_forms(n):
        for alias, rule2 in [(form, "")] + _aliases(form, valid.room):
            if alias in valid.norm:
                return Grounded(valid.norm[alias], "repaired", rule + ("+" + rule2 if rule2 else ""))
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


AMBIGUITY_MARKER = "ambiguous request"
"""Start of the simulator's question when a command matches several objects; it is answered with
a number ("0", "1", ...), which is not in the valid list."""


def is_ambiguity_question(observation: str) -> bool:
    return observation.strip().lower().startswith(AMBIGUITY_MARKER)


def executable_form(action: str, valid: list[str], room: str | None = None, observation: str = "",
                    accepted: bool | None = None) -> tuple[str | None, str]:
    """The form of gold step ``action`` the agent can choose at a state with valid list ``valid``,
    and the rule that gave it: ``(valid action, rule)``; rule "" when ``action`` is in the list.

    No fuzzy spelling repair (two flower pots differ by one digit). When no rule applies, the gold
    text itself is the executable form where the simulator is known to accept it: a number that
    answers the simulator's ambiguity question in ``observation`` (rule "answer"), or
    ``accepted=True`` (the step was played and not rejected; rule "as given"). Otherwise
    ``(None, "unmapped")``."""
    if action in valid or action in ALWAYS_VALID:
        return action, ""
    g = ground(action, ValidSet(valid, room), cutoff=1.0)
    if g.action is not None and g.rule != "spelling":
        return g.action, g.rule
    if action.strip().isdigit() and is_ambiguity_question(observation):
        return action.strip(), "answer"
    if accepted:
        return action, "as given"
    return None, "unmapped"


def candidate_actions(valid: list[str], observation: str) -> list[str]:
    """The agent's candidates at a state: the valid list, plus the numbered answers when the
    simulator asked which object was meant (``Ambiguous request`` lists ``0: ...``, ``1: ...``)."""
    if not is_ambiguity_question(observation):
        return list(valid)
    nums = re.findall(r"^\s*(\d+):", observation, flags=re.M)
    return list(valid) + [n for n in nums if n not in valid]
