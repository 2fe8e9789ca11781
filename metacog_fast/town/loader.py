"""Loading world and scenario files: JSON parse, schema validation, cross-checks
against the world, and seeded random fill of every attribute left out."""
from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metacog_fast.town.schema import RULE_SCHEMAS, SCENARIO_SCHEMA, WORLD_SCHEMA, SchemaError, validate
from metacog_fast.town.world import Area, World, WorldObject

BUILTIN_SCENARIOS = ("party", "zombie", "mystery")
DEFAULT_WORLD = "town"
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

_FIRST_NAMES = [
    "Ada", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivan", "June", "Kai", "Lena", "Milo", "Nora",
    "Omar", "Pia", "Quinn", "Rosa", "Sam", "Tara", "Uma", "Vik", "Wes", "Xena", "Yuri", "Zoe", "Abel", "Bea",
    "Cruz", "Dina", "Emil", "Flor", "Gale", "Hugo", "Iris", "Jon", "Kira", "Leo", "Mae", "Ned",
]
_TRAITS = ["cautious", "curious", "friendly", "stubborn", "brave", "anxious", "cheerful", "quiet", "practical",
           "impulsive", "kind", "sceptical", "organised", "talkative", "resourceful"]
_JOBS = ["baker", "nurse", "teacher", "student", "mechanic", "librarian", "shop keeper", "painter", "farmer",
         "retired engineer", "barista", "doctor", "musician", "postman", "gardener"]
_GOALS = ["make a new friend today", "find out what is happening in town", "get some work done",
          "help a neighbour", "learn something new", "relax and enjoy the day"]


@dataclass
class AgentSpec:
    """One agent of a scenario after random fill (every field set)."""

    name: str
    """Unique name."""
    description: str
    """Who the agent is (occupation, age...)."""
    personality: str
    """A few traits."""
    goal: str
    """Initial goal ("" = none; zombie survivors start without one)."""
    location: str
    """Start location (a world location name)."""
    position: tuple[int, int]
    """Start cell."""
    role: str = "resident"
    """Scenario role: resident, host, murderer, detective..."""
    age: int = 30
    """Age in years."""


@dataclass
class InterviewQuestion:
    """A question asked at the end of a run."""

    question: str
    """The question text."""
    agents: list[str] | None = None
    """Who is asked (``None`` = every agent)."""
    answer: str = "text"
    """``text`` (free), ``agents`` (one of the agents' names), ``scale`` (1-10) or ``yesno``."""


@dataclass
class Scenario:
    """A loaded scenario (validated and filled)."""

    name: str
    """Scenario name."""
    description: str
    """Premise shown to every agent."""
    world: World
    """The world it runs in."""
    agents: list[AgentSpec]
    """Agents after random fill."""
    steps: int = 50
    """Default number of simulation steps."""
    seconds_per_step: float = 10.0
    """Simulation seconds per step (short-term memory lives ~30 s = 3 steps by default)."""
    start_time: str = "2024-12-24T17:00"
    """Clock time of step 0 (shown to agents)."""
    seed: int = 0
    """Seed used for the random fill and the simulation."""
    perception_range: float = 5.0
    """Cells an agent sees (Euclidean)."""
    agent_speed: int = 2
    """Cells an agent walks per step."""
    meta_questions: list[str] = field(default_factory=list)
    """Seed introspective questions (agents generate their own on top)."""
    interview_questions: list[InterviewQuestion] = field(default_factory=list)
    """End-of-run interview."""
    rules: dict[str, Any] = field(default_factory=lambda: {"type": "none"})
    """Scenario-specific actors and rules (``type``: none, zombie, party, mystery)."""
    source: str = ""
    """File it came from."""


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: file not found") from None
    except json.JSONDecodeError as e:
        raise SchemaError(path, f"<line {e.lineno} column {e.colno}>", f"malformed JSON: {e.msg}") from None


def _data_path(kind: str, name: str) -> str:
    return os.path.join(DATA_DIR, kind, f"{name}.json")


def resolve(kind: str, name_or_path: str) -> str:
    """A built-in name (``zombie``, ``town``) or a file path -> the file path."""
    if os.path.sep in name_or_path or name_or_path.endswith(".json"):
        return name_or_path
    p = _data_path(kind, name_or_path)
    if not os.path.isfile(p):
        builtin = sorted(f[:-5] for f in os.listdir(os.path.dirname(p)) if f.endswith(".json"))
        raise FileNotFoundError(f"{kind[:-1]} {name_or_path!r}: no such built-in ({builtin}) and not a .json path")
    return p


def load_world(name_or_path: str | dict = DEFAULT_WORLD, source: str | None = None) -> World:
    """Load and validate a world file (or an already parsed dict)."""
    if isinstance(name_or_path, dict):
        doc, src = name_or_path, source or "<world>"
    else:
        src = resolve("worlds", name_or_path)
        doc = _read_json(src)
    validate(doc, WORLD_SCHEMA, src)
    W, H = doc["width"], doc["height"]
    walk = np.ones((H, W), bool)
    if "map" in doc:
        rows = doc["map"]
        if len(rows) != H:
            raise SchemaError(src, "map", f"expected {H} rows (height), got {len(rows)}")
        for i, r in enumerate(rows):
            if len(r) != W:
                raise SchemaError(src, f"map[{i}]", f"expected a row of {W} characters (width), got {len(r)}")
            walk[i] = np.frombuffer(r.encode("ascii", "replace"), np.uint8) != ord("#")
    for i, b in enumerate(doc.get("walls", [])):
        _check_bounds(src, f"walls[{i}]", b, W, H)
        walk[b[1]: b[3] + 1, b[0]: b[2] + 1] = False
    locations, rooms, names = [], [], set()
    for i, loc in enumerate(doc["locations"]):
        path = f"locations[{i}]"
        _check_bounds(src, f"{path}.bounds", loc["bounds"], W, H)
        if loc["name"] in names:
            raise SchemaError(src, f"{path}.name", f"expected a unique name, {loc['name']!r} is used twice")
        names.add(loc["name"])
        area = Area(loc["name"], tuple(loc["bounds"]), loc.get("description", ""))
        x0, y0, x1, y1 = area.bounds
        if not walk[y0: y1 + 1, x0: x1 + 1].any():
            raise SchemaError(src, f"{path}.bounds", "expected at least one walkable cell inside the location")
        locations.append(area)
        for j, room in enumerate(loc.get("rooms", [])):
            rb = room["bounds"]
            _check_bounds(src, f"{path}.rooms[{j}].bounds", rb, W, H)
            if not (x0 <= rb[0] and y0 <= rb[1] and rb[2] <= x1 and rb[3] <= y1):
                raise SchemaError(src, f"{path}.rooms[{j}].bounds", f"expected a rectangle inside the location {area.bounds}")
            rooms.append(Area(room["name"], tuple(rb), room.get("description", ""), parent=area.name))
    objects, onames = [], set()
    for i, o in enumerate(doc.get("objects", [])):
        x, y = o["pos"]
        if not (x < W and y < H) or not walk[y, x]:
            raise SchemaError(src, f"objects[{i}].pos", f"expected a walkable cell inside the {W}x{H} map, got {[x, y]}")
        if o["name"] in onames:
            raise SchemaError(src, f"objects[{i}].name", f"expected a unique name, {o['name']!r} is used twice")
        onames.add(o["name"])
        objects.append(WorldObject(o["name"], (x, y), tuple(o.get("actions", ["use"])), o.get("description", "")))
    return World(doc.get("name", os.path.basename(src)[:-5] if src.endswith(".json") else src), walk, locations, rooms, objects)


def _check_bounds(src: str, field_: str, b: list[int], W: int, H: int) -> None:
    x0, y0, x1, y1 = b
    if not (x0 <= x1 < W and y0 <= y1 < H):
        raise SchemaError(src, field_, f"expected [x0, y0, x1, y1] with x0 <= x1 < {W} and y0 <= y1 < {H}, got {b}")


def load_scenario(name_or_path: str | dict, world: World | str | None = None, *, seed: int | None = None,
                  n_agents: int | None = None, steps: int | None = None, source: str | None = None) -> Scenario:
    """Load, validate and fill a scenario.

    ``world`` overrides the scenario's ``world`` field; ``seed``, ``n_agents`` and ``steps``
    override the file's ``seed``, ``num_agents`` and ``steps``. Missing attributes of agents
    (and missing agents up to ``n_agents``) are drawn from ``random.Random(seed)``.
    """
    if isinstance(name_or_path, dict):
        doc, src = name_or_path, source or "<scenario>"
    else:
        src = resolve("scenarios", name_or_path)
        doc = _read_json(src)
    validate(doc, SCENARIO_SCHEMA, src)
    rules = dict(doc.get("rules", {"type": "none"}))
    validate(rules, RULE_SCHEMAS[rules["type"]], src, prefix=("rules",))
    if world is None or isinstance(world, str):
        world = load_world(world or doc.get("world", DEFAULT_WORLD))
    sd = int(doc.get("seed", 0) if seed is None else seed)
    rng = random.Random(sd)
    loc_names = [a.name for a in world.locations]

    def check_loc(value: str, field_: str) -> None:
        if value not in loc_names:
            raise SchemaError(src, field_, f"expected a location of world {world.name!r} {loc_names}, got {value!r}")

    defaults = doc.get("agent_defaults", {})
    if "location" in defaults:
        check_loc(defaults["location"], "agent_defaults.location")
    raw_agents = list(doc.get("agents", []))
    want = n_agents if n_agents is not None else int(doc.get("num_agents", max(len(raw_agents), 3)))
    if want < 1:
        raise ValueError(f"n_agents: expected >= 1, got {want}")
    raw_agents = raw_agents[:want] + [{} for _ in range(want - len(raw_agents))]
    used = {a["name"] for a in raw_agents if "name" in a}
    if len(used) != sum(1 for a in raw_agents if "name" in a):
        raise SchemaError(src, "agents", "expected unique agent names")
    pool = [n for n in _FIRST_NAMES if n not in used]
    agents: list[AgentSpec] = []
    occupied: set[tuple[int, int]] = set()
    for i, raw in enumerate(raw_agents):
        a = {**defaults, **raw}
        if "location" in raw:
            check_loc(raw["location"], f"agents[{i}].location")
        name = a.get("name") or (pool.pop(rng.randrange(len(pool))) if pool else f"Agent{i}")
        job = rng.choice(_JOBS)
        age = int(a.get("age", rng.randint(18, 75)))
        traits = ", ".join(rng.sample(_TRAITS, 2))
        location = a.get("location") or rng.choice(loc_names)
        if "position" in a:
            x, y = a["position"]
            if not (x < world.width and y < world.height and world.walkable[y, x]):
                raise SchemaError(src, f"agents[{i}].position", f"expected a walkable cell of world {world.name!r}, got {[x, y]}")
            pos = (x, y)
        else:
            cells = [c for c in world.cells_of(location) if c not in occupied] or world.cells_of(location)
            pos = rng.choice(cells)
        occupied.add(pos)
        agents.append(AgentSpec(
            name=name,
            description=a.get("description") or f"{name} is a {age}-year-old {job}.",
            personality=a.get("personality") or traits,
            goal=a["goal"] if "goal" in a else rng.choice(_GOALS),
            location=location,
            position=pos,
            role=a.get("role", "resident"),
            age=age,
        ))
    names = [a.name for a in agents]
    _check_rules(src, rules, names, check_loc, rng, agents)
    qs = [InterviewQuestion(q["question"], q.get("agents"), q.get("answer", "text")) for q in doc.get("interview_questions", [])]
    for i, q in enumerate(qs):
        for n in q.agents or []:
            if n not in names:
                raise SchemaError(src, f"interview_questions[{i}].agents", f"expected agent names {names}, got {n!r}")
    return Scenario(
        name=doc.get("name", os.path.basename(src)[:-5] if src.endswith(".json") else src),
        description=doc.get("description", ""),
        world=world,
        agents=agents,
        steps=int(steps if steps is not None else doc.get("steps", 50)),
        seconds_per_step=float(doc.get("seconds_per_step", 10.0)),
        start_time=doc.get("start_time", "2024-12-24T17:00"),
        seed=sd,
        perception_range=float(doc.get("perception_range", 5.0)),
        agent_speed=int(doc.get("agent_speed", 2)),
        meta_questions=list(doc.get("meta_questions", [])),
        interview_questions=qs,
        rules=rules,
        source=src,
    )


def _check_rules(src: str, rules: dict, names: list[str], check_loc: Any, rng: random.Random,
                 agents: list[AgentSpec]) -> None:
    t = rules["type"]
    by_name = {a.name: a for a in agents}
    if t == "zombie":
        rules.setdefault("zombies", 3)
        rules.setdefault("zombie_range", 5.0)
        rules.setdefault("kill_range", 1.0)
        rules.setdefault("zombie_speed", 1)
        for key in ("zombie_free", "zombie_start"):
            for j, loc in enumerate(rules.get(key, [])):
                check_loc(loc, f"rules.{key}[{j}]")
        rules.setdefault("zombie_free", [])
    elif t == "party":
        if "host" not in rules:
            hosts = [a.name for a in agents if a.role == "host"]
            rules["host"] = hosts[0] if hosts else rng.choice(names)
        if rules["host"] not in names:
            raise SchemaError(src, "rules.host", f"expected one of the agents {names}, got {rules['host']!r}")
        by_name[rules["host"]].role = "host"
        rules.setdefault("location", by_name[rules["host"]].location)
        check_loc(rules["location"], "rules.location")
        rules.setdefault("start_step", 20)
        rules.setdefault("duration_steps", 10)
        for j, n in enumerate(rules.get("invited", [])):
            if n not in names:
                raise SchemaError(src, f"rules.invited[{j}]", f"expected one of the agents {names}, got {n!r}")
    elif t == "mystery":
        for key, role in (("murderer", "murderer"), ("detective", "detective")):
            if key not in rules:
                marked = [a.name for a in agents if a.role == role]
                free = [a.name for a in agents if a.role not in ("murderer", "detective")]
                if not marked and not free:
                    raise SchemaError(src, "agents", "expected at least 2 agents for a murderer and a detective")
                rules[key] = marked[0] if marked else rng.choice(free)
            if rules[key] not in names:
                raise SchemaError(src, f"rules.{key}", f"expected one of the agents {names}, got {rules[key]!r}")
            by_name[rules[key]].role = role
        if rules["murderer"] == rules["detective"]:
            raise SchemaError(src, "rules.detective", "expected a different agent than the murderer")
        rules.setdefault("kill_cooldown", 5)
        rules.setdefault("kill_range", 1.0)
