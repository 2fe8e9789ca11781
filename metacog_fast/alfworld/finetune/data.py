"""SFT datasets for the ALFWorld actor (pre-deployment, MUSE Algorithm 3).

Sources, each example tagged with its own:

* ``alfworld_expert``: the expert walkthroughs of a split (``train`` by default), played in the
  real environment so that every observation is the one the agent will see;
* ``alfworld_handcoded``: ALFWorld's hand-coded *searching* expert played on the same games
  (``--expert handcoded``): it decides from what it has observed, so it searches receptacles,
  opens closed ones and recovers from a wrong guess, which the planner's walkthrough (it knows
  where every hidden object is) never shows (:mod:`metacog_fast.alfworld.expert`); only its
  won episodes within ``expert_max_steps`` are examples;
* ``alfworld_dagger``: the actor's own episodes with the hand-coded expert's labels
  (:mod:`metacog_fast.alfworld.finetune.dagger`); the loss is taken only on the steps listed in the
  example's ``loss_steps`` (the executed command was the expert's);
* ``agent_episodes``: successful episodes recorded by our own agents (the paper's data), read from
  run folders; only episodes of games in ``episode_splits`` are taken, so that no evaluation game
  leaks into training.

Layout of a dataset folder (resumable: a killed build keeps every finished game)::

    games/<game key>.json     one played walkthrough (atomic write; the folder may be shared)
    games/<game key>.handcoded.json   one episode of the hand-coded expert
    dataset.jsonl             every example: id, source, split, gamefile, task_type, intro, pairs, won
    manifest.json             config, counts per source / task type, games, sha256 of dataset.jsonl
"""
from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from metacog_fast.finetune.base import sha256_file
from metacog_fast._atomic import atomic_open
from metacog_fast.alfworld.fewshot import strip_intro
from metacog_fast.envs.driver import Episode, play, sequence_policy
from metacog_fast.alfworld.protocol import game_key
from metacog_fast.alfworld.store import read_json, write_json_atomic
from metacog_fast.alfworld.env import SPLITS, TASK_TYPES

SOURCES = ("alfworld_expert", "alfworld_handcoded", "alfworld_dagger", "agent_episodes")
"""The ALFWorld sources (the default of ``SFTConfig.sources``)."""
TRAIN_SOURCES = SOURCES + ("scienceworld_gold",)
"""Every source SFT can train on: the ALFWorld ones and ScienceWorld gold paths
(:mod:`metacog_fast.scienceworld.finetune_data`)."""
EXPERTS = ("walkthrough", "handcoded")
"""The experts that can play a dataset's games (``DataConfig.expert``)."""
HELD_OUT_SPLITS = ("valid_unseen", "heldout_rooms")
"""Splits that never feed training: ALFWorld's unseen rooms (final measurement only) and our held-out
rooms of ``train`` (model selection and the seen-vs-unseen gap)."""


@dataclass
class DataConfig:
    """What goes into an SFT dataset."""

    split: str = "train"
    """ALFWorld split whose expert walkthroughs are played (``--env scienceworld``: the ScienceWorld
    variation split, train only)."""
    data: str | None = None
    """ALFWorld data folder (None: the environment's default lookup)."""
    max_games: int | None = None
    """Budget: at most this many walkthrough games, taken round-robin over the six task types
    (None: every game of the split after ``skip_games``)."""
    skip_games: int = 0
    """Leave out the first this-many games of that round-robin order, so that a dataset can extend an
    earlier one: ``--max-games 1200`` and then ``--skip-games 1200 --max-games 1500`` hold disjoint
    games, 2,700 balanced ones together."""
    episode_runs: tuple[str, ...] = ()
    """Run folders whose successful agent episodes are added (``episodes/<game>/*.json``)."""
    episode_splits: tuple[str, ...] = ("valid_seen",)
    """Only agent episodes of games from these splits are taken (pre-deployment games)."""
    workers: int = 1
    """Processes playing walkthroughs or gold paths (each its own environment)."""
    expert: str = "walkthrough"
    """Which expert plays the games: ``walkthrough`` (the game's stored planner walkthrough, which
    knows where hidden objects are) or ``handcoded`` (ALFWorld's hand-coded expert, which searches
    from what it observes; source ``alfworld_handcoded``)."""
    expert_max_steps: int = 50
    """Step limit of a hand-coded expert episode (the evaluation's episode length): only episodes
    it wins within it are examples."""
    exclude_heldout_rooms: bool = False
    """Leave out every game (walkthroughs and agent episodes) of the held-out rooms
    (:mod:`metacog_fast.alfworld.splits`), so that a model trained on this dataset can be measured
    on rooms it has never seen. False keeps earlier datasets' folders resumable as they were made."""

    def validate(self) -> "DataConfig":
        if self.split not in SPLITS or self.split in HELD_OUT_SPLITS:
            allowed = [s for s in SPLITS if s not in HELD_OUT_SPLITS]
            raise ValueError(f"split: expected one of {allowed} (valid_unseen is held out, and so is heldout_rooms), got {self.split!r}")
        bad = [s for s in self.episode_splits if s not in SPLITS or s in HELD_OUT_SPLITS]
        if bad:
            raise ValueError(f"episode_splits: {bad} not allowed (valid_unseen is held out, and so is heldout_rooms; splits: {SPLITS})")
        if self.max_games is not None and (not isinstance(self.max_games, int) or self.max_games < 1):
            raise ValueError(f"max_games: expected None or an int >= 1, got {self.max_games!r}")
        if not isinstance(self.skip_games, int) or self.skip_games < 0:
            raise ValueError(f"skip_games: expected an int >= 0, got {self.skip_games!r}")
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"workers: expected an int >= 1, got {self.workers!r}")
        if self.expert not in EXPERTS:
            raise ValueError(f"expert: expected one of {EXPERTS}, got {self.expert!r}")
        if not isinstance(self.expert_max_steps, int) or self.expert_max_steps < 1:
            raise ValueError(f"expert_max_steps: expected an int >= 1, got {self.expert_max_steps!r}")
        return self


def select_walkthrough_games(split: str, max_games: int | None, data: str | None = None,
                             skip_games: int = 0, exclude_heldout_rooms: bool = False) -> list[Path]:
    """The split's games round-robin over the task types (sorted inside a type), so that every
    prefix is balanced; ``max_games`` of them (None: all) after the first ``skip_games``;
    ``exclude_heldout_rooms``: without the games of :func:`metacog_fast.alfworld.splits.heldout_scenes`."""
    from metacog_fast.alfworld.env import list_games, task_type_of

    games = list_games(split, data)
    if exclude_heldout_rooms:
        from metacog_fast.alfworld.splits import heldout_scenes, scene_of

        held = heldout_scenes()
        games = [g for g in games if scene_of(g) not in held]
    if skip_games >= len(games):
        raise ValueError(f"skip_games: {skip_games} leaves none of the {len(games)} games of {split!r}")
    n = len(games) if max_games is None else min(skip_games + max_games, len(games))
    by_type: dict[str, list[Path]] = {}
    for g in games:
        by_type.setdefault(task_type_of(g), []).append(g)
    order = [t for t in TASK_TYPES if t in by_type] + sorted(t for t in by_type if t not in TASK_TYPES)
    out: list[Path] = []
    r = 0
    while len(out) < n:
        for t in order:
            if r < len(by_type[t]) and len(out) < n:
                out.append(by_type[t][r])
        r += 1
    return out[skip_games:]


def _pairs(ep: Episode) -> list[list[str]]:
    """[[action, observation with whitespace runs collapsed], ...] of a played episode."""
    return [[a, " ".join(o.split())] for a, o in zip(ep.actions, ep.observations[1:])]


def play_walkthrough(env: Any, gamefile: Path, split: str) -> dict[str, Any]:
    """Play ``gamefile``'s expert walkthrough; the example record (``won`` says if it solved it)."""
    obs, info = env.reset(game=str(gamefile))
    ep = play(env, sequence_policy(env.walkthrough), None, start=(obs, info))
    pairs = _pairs(ep)
    info = ep.info
    return {"id": f"alfworld_expert/{split}/{game_key(gamefile)}", "source": "alfworld_expert", "split": split,
            "gamefile": str(Path(*gamefile.parts[-3:])), "task_type": info["task_type"], "intro": strip_intro(obs),
            "pairs": pairs, "won": bool(info.get("won"))}


def play_handcoded(env: Any, gamefile: Path, split: str) -> dict[str, Any]:
    """Play ALFWorld's hand-coded expert on ``gamefile`` until it wins, gives up or the episode
    ends (``env`` made with ``handcoded_expert=True``; its episode limit is the step budget)."""
    obs, info = env.reset(game=str(gamefile))
    ep = play(env, lambda obs, info: env.handcoded_action(), None, start=(obs, info))
    pairs = _pairs(ep)
    info = ep.info
    return {"id": f"alfworld_handcoded/{split}/{game_key(gamefile)}", "source": "alfworld_handcoded", "split": split,
            "gamefile": str(Path(*gamefile.parts[-3:])), "task_type": info["task_type"], "intro": strip_intro(obs),
            "pairs": pairs, "won": bool(info.get("won")), "expert_gave_up": env._expert.gave_up}


def _record_name(gamefile: str | Path, expert: str) -> str:
    return f"{game_key(gamefile)}.json" if expert == "walkthrough" else f"{game_key(gamefile)}.{expert}.json"


def _play_games(args: tuple[str, list[str], str, str | None, int, str, int]) -> int:
    games_root, gamefiles, split, data, position, expert, max_steps = args
    from tqdm import tqdm

    from metacog_fast.envs import make_env

    games_dir = Path(games_root)
    if expert == "handcoded":
        env = make_env("alfworld", split=split, data=data, max_episode_steps=max_steps, handcoded_expert=True)
    else:
        env = make_env("alfworld", split=split, data=data, max_episode_steps=200)
    played = 0
    try:
        for g in tqdm(gamefiles, desc=f"{expert}[{position}]", position=position, file=sys.stderr,
                      dynamic_ncols=True, mininterval=2.0):
            p = Path(g)
            rec = play_handcoded(env, p, split) if expert == "handcoded" else play_walkthrough(env, p, split)
            write_json_atomic(games_dir / _record_name(p, expert), rec)
            played += 1
    finally:
        env.close()
    return played


def _agent_episode_examples(runs: Sequence[str], splits: Sequence[str],
                            exclude_heldout_rooms: bool = False) -> list[dict[str, Any]]:
    """Successful episodes of the run folders whose game lies in ``splits`` (and, with
    ``exclude_heldout_rooms``, outside the held-out rooms)."""
    held: frozenset[int] = frozenset()
    if exclude_heldout_rooms:
        from metacog_fast.alfworld.splits import heldout_scenes

        held = heldout_scenes()
    from metacog_fast.alfworld.splits import scene_of

    out: list[dict[str, Any]] = []
    for run in runs:
        root = Path(run)
        if not root.is_dir():
            raise FileNotFoundError(f"episode_runs: {root} is not a folder")
        files = sorted(root.rglob("episodes/*/*.json"))
        for f in files:
            r = read_json(f)
            if not r.get("won"):
                continue
            split = Path(r["gamefile"]).parts[-4] if len(Path(r["gamefile"]).parts) >= 4 else ""
            if split not in splits or (held and scene_of(r["gamefile"]) in held):
                continue
            prefix = r.get("begin", {}).get("prefix", "")
            intro = _intro_of_prefix(prefix)
            if intro is None:
                continue
            out.append({"id": f"agent_episodes/{f.relative_to(root.parent)}", "source": "agent_episodes",
                        "split": split, "gamefile": str(Path(*Path(r["gamefile"]).parts[-3:])),
                        "task_type": r["task_type"], "intro": intro, "pairs": r["pairs"], "won": True,
                        "agent": r.get("agent")})
    return out


def _intro_of_prefix(prefix: str) -> str | None:
    """The first observation inside an actor prefix (after "### Your turn", before a plan line)."""
    marker = "### Your turn\n"
    if marker not in prefix:
        return None
    body = prefix.split(marker, 1)[1]
    lines = [ln for ln in body.rstrip("\n").split("\n") if not ln.startswith("Plan: ")]
    return "\n".join(lines)


def build_dataset(out_dir: str | Path, cfg: DataConfig, games_dir: str | Path | None = None) -> dict[str, Any]:
    """Build (or resume) the dataset in ``out_dir``; returns the manifest. ``games_dir``: where the
    played walkthroughs are kept (default ``out_dir/games``); a played walkthrough depends on its
    game only, so datasets of one split may share the folder and never play a game twice."""
    cfg.validate()
    out = Path(out_dir)
    games_root = Path(games_dir) if games_dir is not None else out / "games"
    games_root.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    cfg_file = out / "config.json"
    if cfg_file.exists():
        old = {**_cfg_dict(DataConfig()), **read_json(cfg_file)}  # fields added since it was written: defaults
        if {k: v for k, v in old.items() if k != "workers"} != {k: v for k, v in _cfg_dict(cfg).items() if k != "workers"}:
            raise ValueError(f"{cfg_file}: the folder holds a dataset of another configuration; use another folder")
    write_json_atomic(cfg_file, _cfg_dict(cfg))
    t0 = time.perf_counter()
    games = select_walkthrough_games(cfg.split, cfg.max_games, cfg.data, cfg.skip_games, cfg.exclude_heldout_rooms)
    todo = [str(g) for g in games if not (games_root / _record_name(g, cfg.expert)).exists()]
    if todo:
        n = min(cfg.workers, len(todo))
        shards = [todo[i::n] for i in range(n)]
        jobs = [(str(games_root), s, cfg.split, cfg.data, i, cfg.expert, cfg.expert_max_steps) for i, s in enumerate(shards)]
        if n == 1:
            _play_games(jobs[0])
        else:
            with mp.get_context("spawn").Pool(n) as pool:
                pool.map(_play_games, jobs)
    records = [read_json(games_root / _record_name(g, cfg.expert)) for g in games]
    expert = [r for r in records if r["won"]]
    episodes = _agent_episode_examples(cfg.episode_runs, cfg.episode_splits, cfg.exclude_heldout_rooms)
    examples = expert + episodes
    path = out / "dataset.jsonl"
    with atomic_open(path, "w") as f:
        for ex in examples:
            f.write(json.dumps(ex) + "\n")
    manifest = {
        "config": _cfg_dict(cfg),
        "examples": len(examples),
        "by_source": dict(Counter(e["source"] for e in examples)),
        "by_task_type": dict(Counter(e["task_type"] for e in examples)),
        "walkthroughs_played": len(records),
        "walkthroughs_not_won": [r["gamefile"] for r in records if not r["won"]],
        "steps": sum(len(e["pairs"]) for e in examples),
        "games": sorted({e["gamefile"] for e in examples}),
        "dataset_sha256": sha256_file(path),
        "build_seconds": time.perf_counter() - t0,
    }
    write_json_atomic(out / "manifest.json", manifest)
    return manifest


def _cfg_dict(cfg: DataConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["episode_runs"] = [str(x) for x in cfg.episode_runs]
    d["episode_splits"] = list(cfg.episode_splits)
    return d


def load_dataset(folder: str | Path) -> list[dict[str, Any]]:
    """The examples of a built dataset folder; clear errors when it is missing or damaged."""
    root = Path(folder)
    path = root / "dataset.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"dataset: {path} not found; build it with `metacog finetune data --out {root}`")
    manifest = root / "manifest.json"
    if manifest.is_file():
        want = read_json(manifest).get("dataset_sha256")
        if want and want != sha256_file(path):
            raise ValueError(f"dataset: {path} does not match the sha256 in {manifest}; rebuild the dataset")
    out = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"dataset: {path} line {i} is not JSON ({e})") from e
    if not out:
        raise ValueError(f"dataset: {path} holds no examples")
    return out


def iter_sources(examples: Iterable[dict[str, Any]], sources: Sequence[str]) -> list[dict[str, Any]]:
    bad = [s for s in sources if s not in TRAIN_SOURCES]
    if bad:
        raise ValueError(f"sources: unknown {bad}; expected some of {TRAIN_SOURCES}")
    return [e for e in examples if e["source"] in sources]


__all__ = ["DataConfig", "SOURCES", "TRAIN_SOURCES", "build_dataset", "load_dataset", "play_handcoded", "play_walkthrough",
           "select_walkthrough_games",
           "iter_sources"]
