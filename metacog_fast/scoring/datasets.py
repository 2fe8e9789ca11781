"""Labelled M_sa chunks from ALFWorld game files, without running the engine.

Positives: chunks of consecutive expert actions from a game's ``walkthrough`` (an
action list that wins the game), labelled 1 like the chunks of a successful
episode. Negatives (label 0), one per positive, cycling through three
corruptions of the same game:

- ``shuffled``: the chunk's length of actions drawn from the game's walkthrough in
  a shuffled, non-consecutive order;
- ``foreign``: a consecutive chunk from a game of another task type;
- ``repeated``: one action of the walkthrough (or ``look``/``inventory``) repeated.

Observations are short templated strings computed from the action alone (the
engine is not run): ``go to X`` -> "You arrive at X.", ``take A from B`` -> "You pick
up the A from the B.", ...; a repeated action after its first occurrence gets
"Nothing happens." as ALFWorld answers. Task text I: the ALFWorld goal templated
from the task folder name (``pick_clean_then_place_in_recep-Bowl-None-Cabinet-10`` ->
"put a clean bowl in cabinet."); plan P: a templated plan of the task type, the same
for every chunk of a game (a plan is written before acting).

The games come from ``json_2.1.1/<split>/<task>/<trial>/game.tw-pddl``: the root is
``$ALFWORLD_DATA`` or ``<repo>/data/alfworld`` (``scripts/setup.sh`` unpacks
``../shared/data/alfworld/json_2.1.1-dev.tar.xz`` there).
"""
from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass
from pathlib import Path

from metacog_fast.scoring.chunks import Chunk

KINDS = ("shuffled", "foreign", "repeated")


@dataclass(frozen=True)
class Game:
    """One ALFWorld game file read for chunk building."""

    name: str
    """Task folder name / trial folder, e.g. ``pick_heat...-Apple-None-DiningTable-26/trial_T2019...``."""
    task_type: str
    """First ``-``-separated word of the task folder (``pick_heat_then_place_in_recep``)."""
    task: str
    """Templated goal text I."""
    plan: str
    """Templated plan P of the task type."""
    walkthrough: tuple[str, ...]
    """Expert actions that win the game."""


@dataclass(frozen=True)
class ChunkExample:
    """One labelled M_sa training/evaluation example."""

    task: str
    """Task text I."""
    plan: str
    """Initial plan P of the episode."""
    chunk: Chunk
    """(action, observation) pairs of the chunk tau."""
    label: int
    """1 = from a winning (walkthrough) trajectory, 0 = corrupted."""
    game: str
    """Game name (split train/test by game, never by chunk)."""
    task_type: str
    """ALFWorld task type."""
    kind: str
    """``walkthrough`` or one of :data:`KINDS`."""


def default_alfworld_root() -> Path:
    """``$ALFWORLD_DATA`` or ``<repo>/data/alfworld``; raises FileNotFoundError with the fix."""
    env = os.environ.get("ALFWORLD_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[2] / "data" / "alfworld")
    for c in candidates:
        if (c / "json_2.1.1").is_dir():
            return c
    raise FileNotFoundError(
        "ALFWorld games not found (looked in "
        + ", ".join(str(c) for c in candidates)
        + "): run scripts/setup.sh, or unpack ../shared/data/alfworld/json_2.1.1-dev.tar.xz into data/alfworld, "
        "or set ALFWORLD_DATA to a folder holding json_2.1.1/"
    )


def _words(camel: str) -> str:
    return camel.lower()


def task_text(task_folder: str) -> str:
    """ALFWorld goal text from a task folder name (type-Object-MovableRecep-Recep-scene)."""
    parts = task_folder.split("-")
    if len(parts) < 4:
        raise ValueError(f"task_folder: expected 'type-Object-MovableRecep-Recep-scene', got {task_folder!r}")
    ttype, obj, mrecep, recep = parts[0], _words(parts[1]), _words(parts[2]), _words(parts[3])
    if ttype == "look_at_obj_in_light":
        return f"look at {obj} under the {recep}."
    if ttype == "pick_clean_then_place_in_recep":
        return f"put a clean {obj} in {recep}."
    if ttype == "pick_heat_then_place_in_recep":
        return f"put a hot {obj} in {recep}."
    if ttype == "pick_cool_then_place_in_recep":
        return f"put a cool {obj} in {recep}."
    if ttype == "pick_two_obj_and_place":
        return f"put two {obj} in {recep}."
    if ttype == "pick_and_place_with_movable_recep":
        return f"put a {obj} in a {mrecep} in {recep}."
    return f"put a {obj} in {recep}."


_PLANS = {
    "look_at_obj_in_light": "1. find the {obj}. 2. take it. 3. find the {recep}. 4. turn on the {recep} and look at the {obj}.",
    "pick_clean_then_place_in_recep": "1. find the {obj}. 2. take it. 3. go to the sinkbasin and clean it. 4. go to the {recep}. 5. put it there.",
    "pick_heat_then_place_in_recep": "1. find the {obj}. 2. take it. 3. go to the microwave and heat it. 4. go to the {recep}. 5. put it there.",
    "pick_cool_then_place_in_recep": "1. find the {obj}. 2. take it. 3. go to the fridge and cool it. 4. go to the {recep}. 5. put it there.",
    "pick_two_obj_and_place": "1. find the first {obj} and take it. 2. put it in the {recep}. 3. find the second {obj} and take it. 4. put it in the {recep}.",
    "pick_and_place_with_movable_recep": "1. find the {obj} and take it. 2. put it in a {mrecep}. 3. take the {mrecep}. 4. put it in the {recep}.",
}
_DEFAULT_PLAN = "1. find the {obj}. 2. take it. 3. go to the {recep}. 4. put it there."


def plan_text(task_folder: str) -> str:
    """A templated initial plan for the task (the LLM's plan P in a real episode)."""
    parts = task_folder.split("-")
    if len(parts) < 4:
        raise ValueError(f"task_folder: expected 'type-Object-MovableRecep-Recep-scene', got {task_folder!r}")
    fmt = _PLANS.get(parts[0], _DEFAULT_PLAN)
    return fmt.format(obj=_words(parts[1]), mrecep=_words(parts[2]), recep=_words(parts[3]))


_OBS_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^go to (.+)$"), "You arrive at {0}."),
    (re.compile(r"^take (.+) from (.+)$"), "You pick up the {0} from the {1}."),
    (re.compile(r"^(?:move|put) (.+) (?:to|in/on|in|on) (.+)$"), "You put the {0} in/on the {1}."),
    (re.compile(r"^open (.+)$"), "You open the {0}."),
    (re.compile(r"^close (.+)$"), "You close the {0}."),
    (re.compile(r"^clean (.+) with (.+)$"), "You clean the {0} using the {1}."),
    (re.compile(r"^heat (.+) with (.+)$"), "You heat the {0} using the {1}."),
    (re.compile(r"^cool (.+) with (.+)$"), "You cool the {0} using the {1}."),
    (re.compile(r"^use (.+)$"), "You turn on the {0}."),
    (re.compile(r"^examine (.+)$"), "You examine the {0}."),
    (re.compile(r"^inventory$"), "You are not carrying anything."),
    (re.compile(r"^look$"), "You are in the middle of a room."),
]


def templated_observation(action: str) -> str:
    """A short ALFWorld-style observation for ``action`` ("Nothing happens." when unknown)."""
    for pat, fmt in _OBS_RULES:
        m = pat.match(action.strip())
        if m:
            return fmt.format(*m.groups())
    return "Nothing happens."


def _pairs(actions: list[str]) -> Chunk:
    return [(a, templated_observation(a)) for a in actions]


def find_games(root: str | os.PathLike | None = None, split: str = "valid_seen") -> list[Path]:
    """Sorted ``game.tw-pddl`` paths of a split."""
    base = Path(root) if root is not None else default_alfworld_root()
    folder = base / "json_2.1.1" / split
    if not folder.is_dir():
        raise FileNotFoundError(f"split: no folder {folder} (expected json_2.1.1/<split>/<task>/<trial>/game.tw-pddl)")
    games = sorted(folder.glob("*/*/game.tw-pddl"))
    if not games:
        raise FileNotFoundError(f"split: {folder} holds no */*/game.tw-pddl files")
    return games


def load_game(path: str | os.PathLike) -> Game:
    """Read one ``game.tw-pddl`` (JSON with a ``walkthrough`` list)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"path: {p} is not valid JSON ({exc})") from None
    walk = data.get("walkthrough") if isinstance(data, dict) else None
    if not isinstance(walk, list) or not walk or not all(isinstance(a, str) and a.strip() for a in walk):
        raise ValueError(f"path: {p} has no 'walkthrough' list of action strings")
    task_folder = p.parent.parent.name
    return Game(
        name=f"{task_folder}/{p.parent.name}",
        task_type=task_folder.split("-")[0],
        task=task_text(task_folder),
        plan=plan_text(task_folder),
        walkthrough=tuple(a.strip() for a in walk),
    )


def _negative(kind: str, game: Game, chunk_len: int, others: list[Game], rng: random.Random) -> Chunk:
    walk = list(game.walkthrough)
    if kind == "shuffled" and len(walk) >= 2:
        for _ in range(20):
            acts = [walk[i] for i in rng.sample(range(len(walk)), min(chunk_len, len(walk)))]
            consecutive = any(walk[s : s + len(acts)] == acts for s in range(len(walk)))
            if not consecutive:
                return _pairs(acts)
        return _pairs(list(reversed(walk[:chunk_len])))
    if kind in ("shuffled", "foreign"):
        foreign = [g for g in others if g.task_type != game.task_type] or others
        if foreign:
            src = rng.choice(foreign).walkthrough
            start = rng.randrange(0, max(1, len(src) - chunk_len + 1))
            return _pairs(list(src[start : start + chunk_len]))
    # repeated: a useless action over and over
    act = rng.choice(walk + ["look", "inventory"])
    pairs = [(act, templated_observation(act))]
    pairs += [(act, "Nothing happens.")] * (chunk_len - 1)
    return pairs


def build_chunk_dataset(root: str | os.PathLike | None = None, split: str = "valid_seen",
                        max_games: int | None = None, size: int = 4, seed: int = 0) -> list[ChunkExample]:
    """Positive walkthrough chunks and as many corrupted negatives, for the games of ``split``.

    ``max_games``: keep the first N games of a seeded shuffle (all when None).
    Deterministic for a given (split, max_games, size, seed).
    """
    if int(size) < 1:
        raise ValueError(f"size: expected a positive chunk size, got {size}")
    paths = find_games(root, split)
    rng = random.Random(seed)
    rng.shuffle(paths)
    if max_games is not None:
        if int(max_games) < 1:
            raise ValueError(f"max_games: expected a positive count, got {max_games}")
        paths = paths[: int(max_games)]
    games = [load_game(p) for p in paths]
    out: list[ChunkExample] = []
    k = 0
    for gi, g in enumerate(games):
        others = games[:gi] + games[gi + 1 :]
        walk = list(g.walkthrough)
        for s in range(0, len(walk), int(size)):
            acts = walk[s : s + int(size)]
            out.append(ChunkExample(g.task, g.plan, _pairs(acts), 1, g.name, g.task_type, "walkthrough"))
            kind = KINDS[k % len(KINDS)]
            k += 1
            neg = _negative(kind, g, len(acts), others, rng)
            out.append(ChunkExample(g.task, g.plan, neg, 0, g.name, g.task_type, kind))
    return out


def split_by_game(examples: list[ChunkExample], test_fraction: float = 0.3,
                  seed: int = 0) -> tuple[list[ChunkExample], list[ChunkExample]]:
    """(train, test) with every game on one side only."""
    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction: expected a value in (0, 1), got {test_fraction}")
    names = sorted({e.game for e in examples})
    if len(names) < 2:
        raise ValueError(f"examples: need at least 2 games to split, got {len(names)}")
    random.Random(seed).shuffle(names)
    n_test = max(1, int(round(len(names) * float(test_fraction))))
    test_games = set(names[:n_test])
    return [e for e in examples if e.game not in test_games], [e for e in examples if e.game in test_games]
