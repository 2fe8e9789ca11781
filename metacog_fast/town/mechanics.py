"""Scenario mechanics the agents act through: what an agent knows, how it learns it, and the
scenario options that knowledge opens (issue 53, docs/sim.md "Scenario mechanics").

Knowledge is a set of facts per agent (``GenerativeAgent.knows``):
- ``"party"``: the agent knows the party's place and time (the host from the start, guests when
  invited or told in a conversation);
- ``"attack:<murderer>:<victim>"``: the agent saw the murderer attack the victim, or was told so by
  someone who knows it. It is the evidence a detective accuses on.

Facts spread in conversations: when two agents talk, each learns what the other knows, and both
remember who told whom (a ``conversation`` memory).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metacog_fast.town.generative import Action
from metacog_fast.town.world import World

PARTY = "party"


def attack_fact(murderer: str, victim: str) -> str:
    """The fact "``murderer`` attacked ``victim``"."""
    return f"attack:{murderer}:{victim}"


def evidence_against(knows: set[str]) -> dict[str, list[str]]:
    """{suspect: [victims]} of every attack fact in ``knows`` (sorted for a stable option order)."""
    out: dict[str, list[str]] = {}
    for f in sorted(knows):
        if f.startswith("attack:"):
            _, who, victim = f.split(":", 2)
            out.setdefault(who, []).append(victim)
    return out


def fact_text(fact: str, rules: dict, clock_of_start: str) -> str:
    """How a fact reads in a memory or a notice."""
    if fact == PARTY:
        return f"the Christmas party is at the {rules['location']} at {clock_of_start}"
    if fact.startswith("attack:"):
        _, who, victim = fact.split(":", 2)
        return f"{who} attacked {victim}"
    raise ValueError(f"fact: expected 'party' or 'attack:<murderer>:<victim>', got {fact!r}")


@dataclass(frozen=True)
class Told:
    """One fact passed on in a conversation."""

    teller: str
    hearer: str
    fact: str


def share(a_name: str, a_knows: set[str], b_name: str, b_knows: set[str]) -> list[Told]:
    """Exchange facts between two agents who talk; both sets are updated in place.

    Returns what each newly learned (the party fact is left to the caller, who records it as an
    invitation)."""
    told: list[Told] = []
    for teller, src, hearer, dst in ((a_name, a_knows, b_name, b_knows), (b_name, b_knows, a_name, a_knows)):
        for f in sorted(src - dst):
            told.append(Told(teller, hearer, f))
    for t in told:
        (b_knows if t.hearer == b_name else a_knows).add(t.fact)
    return told


def party_phase(step: int, rules: dict) -> str:
    """``"before"``, ``"during"`` or ``"after"`` the party window at ``step``."""
    s0, dur = rules["start_step"], rules["duration_steps"]
    return "before" if step < s0 else ("during" if step < s0 + dur else "after")


def party_options(step: int, rules: dict, here: str, target: str | None) -> tuple[Action | None, str | None]:
    """For an agent who knows the party: (the option that takes it there or keeps it there,
    the label its "keep going" option should read), both None once the party is over."""
    phase = party_phase(step, rules)
    loc = rules["location"]
    if phase == "after":
        return None, None
    if here == loc:
        label = "wait here for the Christmas party" if phase == "before" else "stay at the Christmas party"
        return Action("stay", label), None
    if target == loc:
        return None, f"keep going to the Christmas party at the {loc}"
    return Action("move", f"go to the Christmas party at the {loc}", loc), None


def follow_step(world: World, pos: tuple[int, int], goal: tuple[int, int], steps: int,
                stop_within: int = 1) -> tuple[int, int]:
    """Walk up to ``steps`` cells along a shortest path toward ``goal``, stopping ``stop_within``
    path steps from it (1 = on a neighbouring cell). Stays put when ``goal`` is unreachable."""
    dist = world.distance_field((goal,))
    x, y = pos
    H, W = dist.shape
    for _ in range(steps):
        d0 = dist[y, x]
        if d0 <= stop_within:
            break
        nxt = None
        for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
            if 0 <= nx < W and 0 <= ny < H and 0 <= dist[ny, nx] < d0:
                nxt = (nx, ny)
                break
        if nxt is None:
            break
        x, y = nxt
    return (x, y)


def distance(a: tuple[int, int], b: tuple[int, int]) -> float:
    return float(np.hypot(a[0] - b[0], a[1] - b[1]))
