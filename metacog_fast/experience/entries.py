"""The entries of the three memories, with provenance and use counts, and their JSON form."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SOP_STATUSES = ("active", "demoted", "retired")


@dataclass
class Provenance:
    """Where an entry came from."""

    task: str = ""
    """Task text (or game id) whose experience produced the entry."""
    run: str = ""
    """Run id (the protocol's run folder name)."""
    date: str = ""
    """UTC ISO date of creation."""
    model: str = ""
    """LLM URI that wrote it (lets another backend load it: cross-model)."""


@dataclass
class Counts:
    """How often the entry was used, and how those uses ended."""

    uses: int = 0
    """Times the entry was shown as relevant or fetched (SOPs: fetched by access_guide or auto-consulted)."""
    successes: int = 0
    """Uses whose sub-task (SOPs) or task (strategic, tool) succeeded."""
    failures: int = 0
    """Uses that ended in failure."""

    def record(self, success: bool) -> None:
        self.uses += 1
        if success:
            self.successes += 1
        else:
            self.failures += 1

    def merge(self, other: "Counts") -> None:
        self.uses += other.uses
        self.successes += other.successes
        self.failures += other.failures


@dataclass
class StrategicEntry:
    """A <dilemma, strategy> principle (all of them go into the system prompt)."""

    dilemma: str
    """The situation that caused trouble."""
    strategy: str
    """What to do about it."""
    provenance: Provenance = field(default_factory=Provenance)
    counts: Counts = field(default_factory=Counts)

    @property
    def key(self) -> str:
        return self.dilemma

    def text(self) -> str:
        return f"When {self.dilemma}: {self.strategy}"


@dataclass
class SOP:
    """A standard operating procedure, indexed environment -> skill."""

    env: str
    """Environment (the "application"), e.g. "alfworld"."""
    skill: str
    """Function name, e.g. "heat an object"."""
    preconditions: list[str]
    """What must hold before the steps apply."""
    steps: list[str]
    """Action templates (object numbers replaced by <n>)."""
    notes: list[str] = field(default_factory=list)
    """Caveats learnt along the way."""
    status: str = "active"
    """"active", "demoted" (listed last, marked) or "retired" (kept for the record, never shown)."""
    provenance: Provenance = field(default_factory=Provenance)
    counts: Counts = field(default_factory=Counts)

    @property
    def key(self) -> str:
        return f"{self.env}/{self.skill}"

    def text(self) -> str:
        lines = [f"SOP [{self.env}] {self.skill}"]
        if self.preconditions:
            lines.append("Preconditions: " + "; ".join(self.preconditions))
        lines += [f"{i + 1}. {s}" for i, s in enumerate(self.steps)]
        if self.notes:
            lines.append("Notes: " + "; ".join(self.notes))
        return "\n".join(lines)


@dataclass
class ToolEntry:
    """One action type: a static description (prompt) and a dynamic instruction (after use)."""

    env: str
    """Environment."""
    action: str
    """Action type, e.g. "heat" (the first word(s) of the command)."""
    static: str
    """Description shown in the system prompt."""
    dynamic: str = ""
    """Learnt instruction returned with the observation after this action type is used."""
    provenance: Provenance = field(default_factory=Provenance)
    counts: Counts = field(default_factory=Counts)

    @property
    def key(self) -> str:
        return f"{self.env}/{self.action}"


KINDS = {"strategic": StrategicEntry, "procedural": SOP, "tool": ToolEntry}


def to_dict(entry: Any) -> dict[str, Any]:
    return asdict(entry)


def from_dict(kind: str, d: Any) -> Any:
    """Build an entry of memory ``kind`` from its JSON dict; ValueError naming what is wrong."""
    if kind not in KINDS:
        raise ValueError(f"memory kind must be one of {sorted(KINDS)}, got {kind!r}")
    if not isinstance(d, dict):
        raise ValueError(f"{kind} entry must be a JSON object, got {type(d).__name__}")
    cls = KINDS[kind]
    d = dict(d)
    try:
        prov = Provenance(**d.pop("provenance", {}) or {})
        counts = Counts(**d.pop("counts", {}) or {})
        entry = cls(**d, provenance=prov, counts=counts)
    except TypeError as e:
        raise ValueError(f"malformed {kind} entry {d!r}: {e}") from None
    for name in ("uses", "successes", "failures"):
        v = getattr(entry.counts, name)
        if not isinstance(v, int) or v < 0:
            raise ValueError(f"{kind} entry counts.{name} must be a non-negative int, got {v!r}")
    if isinstance(entry, SOP):
        if entry.status not in SOP_STATUSES:
            raise ValueError(f"SOP status must be one of {SOP_STATUSES}, got {entry.status!r}")
        if not isinstance(entry.steps, list) or not all(isinstance(s, str) for s in entry.steps):
            raise ValueError(f"SOP steps must be a list of strings, got {entry.steps!r}")
    return entry
