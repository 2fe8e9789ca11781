"""A room-disjoint validation split of ALFWorld's ``train`` games: every game of a set of held-out
scenes (rooms), kept out of all training data, so that a model is selected and reported on rooms it
has never seen without touching ``valid_unseen`` (held out for good).

A game folder is named ``<task_type>-<object>-<mrecep>-<recep>-<scene>`` (e.g.
``pick_and_place_simple-Apple-None-Fridge-6``); scenes 1-30 are kitchens, 201-230 living rooms,
301-330 bedrooms, 401-430 bathrooms. Task types live in different rooms (``look_at_obj_in_light``
never in a kitchen), so the held-out scenes are drawn per room kind in proportion to its scenes and,
among ``draws`` seeded candidate sets, the one whose smallest per-task-type share of held-out games
is largest is kept: every task type then has games in the split. The chosen scenes are committed
(``results/alfworld/heldout_rooms.json``) so that every session uses the same ones.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

TASK_TYPES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
              "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
ROOM_KINDS = {0: "kitchen", 2: "livingroom", 3: "bedroom", 4: "bathroom"}
DEFAULT_FILE = Path(__file__).resolve().parents[2] / "results" / "alfworld" / "heldout_rooms.json"


def scene_of(game: str | os.PathLike) -> int:
    """The scene number of a game folder name or of a path inside it."""
    for part in reversed(Path(game).parts):
        head, _, tail = part.rpartition("-")
        if head and tail.isdigit() and part.split("-", 1)[0] in TASK_TYPES:
            return int(tail)
    raise ValueError(f"game: {str(game)!r} names no ALFWorld game folder (<task_type>-...-<scene>)")


def task_type_of(game: str | os.PathLike) -> str:
    """The task type of a game folder name or of a path inside it."""
    for part in reversed(Path(game).parts):
        t = part.split("-", 1)[0]
        if t in TASK_TYPES and "-" in part:
            return t
    raise ValueError(f"game: {str(game)!r} names no ALFWorld game folder (<task_type>-...-<scene>)")


def room_kind(scene: int) -> str:
    """"kitchen", "livingroom", "bedroom" or "bathroom" (ALFRED's floor-plan numbering)."""
    kind = ROOM_KINDS.get(scene // 100)
    if kind is None:
        raise ValueError(f"scene: {scene} is not an ALFRED floor plan (1-30, 201-230, 301-330, 401-430)")
    return kind


def select_heldout_scenes(games: Sequence[str], n_scenes: int = 15, seed: int = 0, draws: int = 2000) -> list[int]:
    """``n_scenes`` scenes of the ``games`` (folder names), drawn per room kind in proportion to its
    scenes; of ``draws`` seeded candidate sets, the one maximising the smallest per-task-type share
    of held-out games (ties: the first drawn)."""
    if not games:
        raise ValueError("games: expected the train game folder names, got none")
    scenes = sorted({scene_of(g) for g in games})
    if not 1 <= n_scenes < len(scenes):
        raise ValueError(f"n_scenes: expected 1..{len(scenes) - 1}, got {n_scenes}")
    by_kind: dict[str, list[int]] = {}
    for s in scenes:
        by_kind.setdefault(room_kind(s), []).append(s)
    kinds = sorted(by_kind)
    quota = {k: n_scenes * len(by_kind[k]) / len(scenes) for k in kinds}
    take = {k: int(np.floor(q)) for k, q in quota.items()}
    for k in sorted(kinds, key=lambda k: -(quota[k] - take[k]))[: n_scenes - sum(take.values())]:
        take[k] += 1
    per_scene_type = Counter((scene_of(g), task_type_of(g)) for g in games)
    totals = Counter(task_type_of(g) for g in games)
    rng = np.random.default_rng(seed)
    best, best_score = None, -1.0
    for _ in range(draws):
        cand = sorted(int(s) for k in kinds for s in rng.choice(by_kind[k], size=take[k], replace=False))
        score = min(sum(per_scene_type[(s, t)] for s in cand) / totals[t] for t in totals)
        if score > best_score:
            best, best_score = cand, score
    assert best is not None
    return best


def split_summary(games: Iterable[str], heldout: Iterable[int]) -> dict[str, Any]:
    """Per task type: game folders in held-out scenes and in the rest."""
    held = set(heldout)
    out: dict[str, dict[str, int]] = {t: {"heldout": 0, "rest": 0} for t in TASK_TYPES}
    for g in games:
        out[task_type_of(g)]["heldout" if scene_of(g) in held else "rest"] += 1
    return out


def write_heldout_file(train_dir: str | os.PathLike, path: str | os.PathLike = DEFAULT_FILE, n_scenes: int = 15,
                       seed: int = 0) -> dict[str, Any]:
    """Select the held-out scenes from ``train_dir``'s game folders and write them with their summary."""
    from metacog_fast._atomic import atomic_write_bytes

    games = sorted(p.name for p in Path(train_dir).iterdir() if p.is_dir())
    scenes = select_heldout_scenes(games, n_scenes, seed)
    trials = {g: sum(1 for q in (Path(train_dir) / g).iterdir() if q.is_dir()) for g in games}
    doc = {"scenes": scenes, "n_scenes": n_scenes, "seed": seed, "rooms": {str(s): room_kind(s) for s in scenes},
           "game_folders": split_summary(games, scenes),
           "trials_heldout": sum(n for g, n in trials.items() if scene_of(g) in scenes),
           "trials_total": sum(trials.values())}
    atomic_write_bytes(path, (json.dumps(doc, indent=2) + "\n").encode())
    return doc


def heldout_scenes(path: str | os.PathLike = DEFAULT_FILE) -> frozenset[int]:
    """The committed held-out scenes (``results/alfworld/heldout_rooms.json``)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"heldout_rooms: {p} is missing (make it with "
                         "`python -m metacog_fast.alfworld.splits <ALFWorld json_2.1.1/train>`)")
    return frozenset(int(s) for s in json.loads(p.read_text())["scenes"])


def in_heldout_rooms(game: str | os.PathLike, scenes: frozenset[int] | None = None) -> bool:
    """Whether a game (folder name or a path inside it) is in a held-out scene."""
    return scene_of(game) in (heldout_scenes() if scenes is None else scenes)


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m metacog_fast.alfworld.splits <ALFWorld json_2.1.1/train folder>")
    print(json.dumps(write_heldout_file(sys.argv[1]), indent=2))
