"""Few-shot examples written by our code from ``train`` walkthroughs.

For each task type we take the games of the ``train`` split with the shortest walkthroughs,
play the walkthrough in the real environment to record its observations, and insert short
think lines derived from the walkthrough commands themselves (what is being looked for, which
operation comes next). The plan that MUSE's examples carry is derived the same way.

Cached as JSON (atomic write) so a run and its workers read one file.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from metacog_fast.alfworld.store import write_json_atomic
from metacog_fast.alfworld.env import TASK_TYPES
from metacog_fast.envs.driver import Step, play, sequence_policy


_OBJ = r"(?P<obj>[a-z]+(?: [a-z]+)*?) \d+"
_TAKE = re.compile(r"^take (?P<obj>.+?) \d+ from (?P<rec>.+?) \d+$")
_MOVE = re.compile(r"^move (?P<obj>.+?) \d+ to (?P<rec>.+?) \d+$")
_OP = re.compile(r"^(?P<op>heat|cool|clean) (?P<obj>.+?) \d+ with (?P<rec>.+?) \d+$")
_USE = re.compile(r"^use (?P<rec>.+?) \d+$")


@dataclass
class Example:
    """One few-shot example: a solved game with think lines."""

    task_type: str
    """Task type (folder prefix)."""
    gamefile: str
    """The train game it was recorded from (relative to the data folder)."""
    intro: str
    """First observation (room description + "Your task is to: ...")."""
    steps: list[list[str]]
    """[action, observation] pairs; think lines are ["think: ...", "OK."]."""
    plan: str
    """Plan derived from the walkthrough ("1. ... 2. ...")."""


def plan_from_walkthrough(actions: list[str]) -> list[str]:
    """Plan steps from walkthrough commands: takes, operations, uses and placements (in order)."""
    steps: list[str] = []
    for a in actions:
        if m := _TAKE.match(a):
            steps.append(f"find and take a {m['obj']}")
        elif m := _OP.match(a):
            steps.append(f"{m['op']} the {m['obj']} with the {m['rec']}")
        elif m := _MOVE.match(a):
            steps.append(f"put the {m['obj']} in/on the {m['rec']}")
        elif m := _USE.match(a):
            steps.append(f"use the {m['rec']}")
    return steps


def format_plan(steps: list[str]) -> str:
    return " ".join(f"{i + 1}. {s}." for i, s in enumerate(steps))


def think_before(action: str) -> str | None:
    """The think line our examples put before ``action`` (None: no think)."""
    if m := _TAKE.match(action):
        return f"think: There is a {m['obj']} here. Next, I take it."
    if m := _OP.match(action):
        return f"think: Now I {m['op']} the {m['obj']} with the {m['rec']}."
    if m := _MOVE.match(action):
        return f"think: I have the {m['obj']}. Now I put it in/on the {m['rec']}."
    if m := _USE.match(action):
        return f"think: Now I turn on the {m['rec']} to look at what I hold."
    return None


def strip_intro(obs: str) -> str:
    """The first observation without TextWorld's banner."""
    text = obs.replace("-= Welcome to TextWorld, ALFRED! =-", "")
    return "\n".join(line.strip() for line in text.strip().splitlines() if line.strip())


def record_example(env: Any, game: Path, max_steps: int) -> Example | None:
    """Play ``game``'s walkthrough; None when it is longer than ``max_steps`` or not won."""
    obs, info = env.reset(game=str(game))
    walk = list(env.walkthrough)
    if len(walk) > max_steps:
        return None
    plan = plan_from_walkthrough(walk)
    steps: list[list[str]] = [[f"think: To do this, I will {'; then '.join(plan)}.", "OK."]]

    def record(step: Step) -> None:
        t = think_before(step.action)
        if t is not None and step.t > 0:
            steps.append([t, "OK."])
        steps.append([step.action, " ".join(step.obs.split())])

    info = play(env, sequence_policy(walk), None, start=(obs, info), on_step=record).info
    if not info.get("won"):
        return None
    return Example(task_type=info["task_type"], gamefile=str(Path(*game.parts[-3:])), intro=strip_intro(obs),
                   steps=steps, plan=format_plan(plan))


def _walk_len(game: Path) -> int:
    with open(game) as f:
        return len(json.load(f).get("walkthrough") or [])


def generate_examples(per_type: int = 2, max_steps: int = 12, data: str | None = None,
                      scan: int = 30) -> dict[str, list[dict[str, Any]]]:
    """``per_type`` examples per task type from the shortest walkthroughs among the first
    ``scan`` train games of each type. Returns {task_type: [Example as dict, ...]}."""
    from metacog_fast.envs import make_env
    from metacog_fast.alfworld.env import list_games, task_type_of

    games = list_games("train", data)
    by_type: dict[str, list[Path]] = {t: [] for t in TASK_TYPES}
    for g in games:
        t = task_type_of(g)
        if t in by_type and len(by_type[t]) < scan:
            by_type[t].append(g)
    out: dict[str, list[dict[str, Any]]] = {}
    env = make_env("alfworld", split="train", data=data)
    try:
        for t, gs in by_type.items():
            ranked = sorted(gs, key=lambda g: (_walk_len(g), str(g)))
            got: list[dict[str, Any]] = []
            seen_dirs: set[str] = set()
            for g in ranked:
                if len(got) >= per_type:
                    break
                if g.parent.parent.name in seen_dirs:  # two different scenes, not two trials of one
                    continue
                ex = record_example(env, g, max_steps)
                if ex is not None:
                    got.append(asdict(ex))
                    seen_dirs.add(g.parent.parent.name)
            if len(got) < per_type:
                raise RuntimeError(f"only {len(got)} walkthrough(s) of at most {max_steps} steps for {t}; "
                                   "raise example_max_steps or scan")
            out[t] = got
    finally:
        env.close()
    return out


def load_examples(path: str | Path, per_type: int = 2, max_steps: int = 12, data: str | None = None
                  ) -> dict[str, list[dict[str, Any]]]:
    """Read the cached examples at ``path``; generate and write them (atomically) when missing."""
    p = Path(path)
    if p.exists():
        with open(p) as f:
            try:
                d = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}: malformed few-shot JSON ({e}); delete it to regenerate") from e
        # A cache with at least as many examples per type serves any smaller count (its first ones),
        # so runs with different --examples never rewrite the shared file.
        if isinstance(d.get("per_type"), int) and d["per_type"] >= per_type and d.get("max_steps") == max_steps:
            ex = d.get("examples")
            if not isinstance(ex, dict) or set(ex) != set(TASK_TYPES):
                raise ValueError(f"{p}: expected examples for the task types {TASK_TYPES}")
            return {t: v[:per_type] for t, v in ex.items()}
    ex = generate_examples(per_type, max_steps, data)
    write_json_atomic(p, {"per_type": per_type, "max_steps": max_steps, "examples": ex})
    return ex


def render_example(ex: dict[str, Any], with_plan: bool = False) -> str:
    """Text of one example as it appears in a prompt."""
    lines = [ex["intro"]]
    if with_plan:
        lines.append(f"Plan: {ex['plan']}")
    for a, o in ex["steps"]:
        if with_plan and a.startswith("think:"):
            continue
        lines.append(f"> {a}")
        lines.append(o)
    return "\n".join(lines)
