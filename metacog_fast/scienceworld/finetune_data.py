"""SFT dataset of the ScienceWorld Swift from the gold paths of ``train`` variations.

Every gold path is played in the real simulator (the environment adapter the agent uses), so each
observation is the one the agent sees. Every gold step is mapped to its executable form
(:func:`metacog_fast.scienceworld.grounding.executable_form`: the valid-list form of ``open door to
hallway``, ``use thermometer in inventory on ...`` etc., the number that answers an ambiguity
question, or the gold text where the simulator accepted it), as in
:func:`metacog_fast.scienceworld.runner.walk_gold`; at every step with an executable form an
example is written, whose completion is that form: ``prompt`` is, character for character, what the LLM Swift scores its
options after at that state (:func:`~metacog_fast.scienceworld.swift.swift_prompt`), and
``completion`` is the option of the gold action (:func:`~metacog_fast.scienceworld.swift.swift_option`).
SFT on them raises the likelihood of exactly the choice the model makes when it acts.

``dev`` variations tune and ``test`` variations measure, so neither can ever be a source.

Layout of a dataset folder (resumable: a killed build keeps every finished variation)::

    variations.json                 train variations of each task (listed once)
    variations/<task>__<v>.json     one played gold path: its states, gold actions, final score
    dataset.jsonl                   one example per admissible gold step
    manifest.json                   config, counts per task, variations, sha256 of dataset.jsonl
"""
from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from metacog_fast._atomic import atomic_open
from metacog_fast.runs.records import read_json, write_json_atomic
from metacog_fast.scienceworld.swift import SwiftState, swift_option, swift_prompt
from metacog_fast.envs.driver import play
from metacog_fast.finetune.base import sha256_file

SOURCE = "scienceworld_gold"
SOURCE_SPLITS = ("train",)
"""ScienceWorld splits whose gold paths may feed training (dev tunes, test measures)."""
HELD_OUT_SPLITS = ("dev", "test")
SIMULATOR_STEP_LIMIT = 100_000
"""The simulator's tick limit while a gold path is played (the agent's runner uses the same)."""


@dataclass
class ScienceWorldDataConfig:
    """What goes into a ScienceWorld Swift SFT dataset."""

    split: str = "train"
    """Variation split whose gold paths are played; only train (dev tunes, test measures)."""
    tasks: list[int] = field(default_factory=lambda: list(range(30)))
    """ScienceWorld task indices 0-29 ("0-29", "0,3,5-7")."""
    max_variations: int | None = None
    """Budget: at most this many variations, taken round-robin over the tasks (the first train
    variation of every task, then the second, ...; None: every train variation)."""
    workers: int = 1
    """Processes playing gold paths (each its own JVM)."""

    def validate(self) -> "ScienceWorldDataConfig":
        if self.split in HELD_OUT_SPLITS:
            raise ValueError(f"split: ScienceWorld {self.split!r} variations are never a training source "
                             f"(dev tunes, test measures); expected one of {SOURCE_SPLITS}")
        if self.split not in SOURCE_SPLITS:
            raise ValueError(f"split: expected one of {SOURCE_SPLITS}, got {self.split!r}")
        if not self.tasks or any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < 30
                                 for t in self.tasks):
            raise ValueError(f"tasks: expected task indices in 0..29, got {self.tasks}")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"tasks: expected distinct indices, got {self.tasks}")
        if self.max_variations is not None and (not isinstance(self.max_variations, int) or self.max_variations < 1):
            raise ValueError(f"max_variations: expected None or an int >= 1, got {self.max_variations!r}")
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ValueError(f"workers: expected an int >= 1, got {self.workers!r}")
        return self


def check_source_variation(env: Any, variation: int) -> None:
    """ValueError unless ``variation`` is a train variation of ``env``'s task (the environment's
    own split lists decide, so a dev or test variation can never slip in as a source)."""
    if env.config.split not in SOURCE_SPLITS:
        raise ValueError(f"split: the environment plays {env.config.split!r} variations; only "
                         f"{SOURCE_SPLITS} may be a training source")
    if variation not in env.variations:
        raise ValueError(f"variation: {variation} is not a train variation of {env.task!r}; dev and test "
                         "variations are never a training source")


def variation_key(task_name: str, variation: int) -> str:
    return f"{task_name}__{variation}"


def play_gold(env: Any, variation: int, task_index: int) -> dict[str, Any]:
    """Play the gold path of train ``variation`` in ``env``; the record of every state on it.

    ``steps[k]``: the state before gold action ``k`` (task, observation, last action, times each
    action was executed), the gold action, whether it was admissible, its executable form and the
    rule that gave it (``executable`` None and ``rule`` "unmapped" when it has none), and the number
    of valid actions."""
    from metacog_fast.scienceworld.amm import is_invalid
    from metacog_fast.scienceworld.grounding import candidate_actions, executable_form, is_ambiguity_question
    from metacog_fast.scienceworld.text import room_of

    check_source_variation(env, variation)
    obs, info = env.reset(variation=variation)
    gold = list(env.gold_path)
    steps: list[dict[str, Any]] = []
    executed: dict[str, int] = {}
    room = [room_of(obs)]

    def policy(obs: str, info: dict[str, Any]) -> str | None:
        k = len(steps)
        if k == len(gold):
            return None
        a, valid = gold[k], list(info["admissible"])
        room[0] = room_of(obs) or room[0]
        form, rule = executable_form(a, candidate_actions(valid, obs), room[0], obs)
        steps.append({"k": k, "task": info["task"], "observation": obs, "last_action": gold[k - 1] if k else "",
                      "executed": dict(executed), "gold": a, "admissible": a in valid, "executable": form,
                      "rule": rule, "n_valid": len(valid)})
        executed[a] = executed.get(a, 0) + 1
        return a

    def observe(step: Any) -> None:
        st = steps[-1]
        if st["executable"] is None:  # the simulator's answer decides
            ok = not is_invalid(step.obs) or is_ambiguity_question(step.obs)
            st["executable"], st["rule"] = (st["gold"], "as given") if ok else (None, "unmapped")

    ep = play(env, policy, None, start=(obs, info), on_step=observe)
    info, done = ep.info, ep.done
    return {"task_name": env.task, "task_index": task_index, "variation": variation, "split": env.config.split,
            "gold_path": gold, "steps": steps, "score": float(info.get("score", 0.0)), "won": bool(info.get("won")),
            "done": bool(done), "errored": bool(info.get("errored")), "restarts": int(getattr(env, "restarts", 0))}


def executable_of(step: dict[str, Any]) -> str | None:
    """A recorded step's executable gold form (records written before the mapping: the gold
    action when it was admissible, else None)."""
    if "executable" in step:
        return step["executable"]
    return step["gold"] if step["admissible"] else None


def examples_of(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The SFT examples of one played gold path: one per step whose gold action has an executable form."""
    out = []
    for st in record["steps"]:
        form = executable_of(st)
        if form is None:
            continue
        s = SwiftState(st["task"], st["observation"], st["last_action"], [], st["executed"])
        out.append({"id": f"{SOURCE}/{record['split']}/{variation_key(record['task_name'], record['variation'])}/"
                          f"{st['k']:03d}",
                    "source": SOURCE, "split": record["split"], "task_type": record["task_name"],
                    "task_index": record["task_index"], "variation": record["variation"], "step": st["k"],
                    "prompt": swift_prompt(s), "completion": swift_option(form), "gold": st["gold"],
                    "executable": form, "rule": st.get("rule", ""), "won": record["won"]})
    return out


def list_variations(tasks: list[int], split: str) -> dict[str, list[int]]:
    """{task index as text: absolute variation indices of ``split``} (one JVM per task)."""
    from metacog_fast.envs import make_env

    out: dict[str, list[int]] = {}
    for t in tasks:
        env = make_env("scienceworld", task=t, split=split, step_limit=SIMULATOR_STEP_LIMIT, gold_path=False)
        try:
            out[str(t)] = env.variations
        finally:
            env.close()
    return out


def select_variations(per_task: dict[str, list[int]], tasks: list[int], max_variations: int | None
                      ) -> list[tuple[int, int]]:
    """(task, variation) round-robin over ``tasks`` (each task's variations in the split's order),
    so that every prefix is balanced over the tasks; the first ``max_variations`` (None: all)."""
    lists = [(t, per_task[str(t)]) for t in tasks]
    total = sum(len(v) for _, v in lists)
    n = total if max_variations is None else min(max_variations, total)
    out: list[tuple[int, int]] = []
    r = 0
    while len(out) < n:
        for t, vs in lists:
            if r < len(vs) and len(out) < n:
                out.append((t, vs[r]))
        r += 1
    return out


def _play_shard(args: tuple[str, list[tuple[int, list[int]]], int]) -> int:
    """Worker: play the gold paths of its (task, variations) groups; one record file per variation."""
    root, groups, position = args
    from tqdm import tqdm

    from metacog_fast.envs import make_env
    from metacog_fast.scienceworld.env import resolve_task

    folder = Path(root)
    played = 0
    bar = tqdm(total=sum(len(vs) for _, vs in groups), desc=f"gold paths[{position}]", position=position,
               file=sys.stderr, dynamic_ncols=True, mininterval=2.0)
    try:
        for task, vs in groups:
            name = resolve_task(task)
            env = make_env("scienceworld", task=task, split="train", step_limit=SIMULATOR_STEP_LIMIT)
            try:
                for v in vs:
                    rec = play_gold(env, v, task)
                    write_json_atomic(folder / f"{variation_key(name, v)}.json", rec)
                    played += 1
                    bar.update(1)
            finally:
                env.close()
    finally:
        bar.close()
    return played


def _shards(todo: list[tuple[int, int]], workers: int) -> list[list[tuple[int, list[int]]]]:
    """Split (task, variation) pairs over ``workers``: whole tasks where possible (a JVM per task),
    each task's variations cut into as many pieces as keep the workers' loads even."""
    by_task: dict[int, list[int]] = {}
    for t, v in todo:
        by_task.setdefault(t, []).append(v)
    n = min(workers, len(todo))
    per = -(-len(todo) // n)
    pieces = [(t, vs[i:i + per]) for t, vs in by_task.items() for i in range(0, len(vs), per)]
    pieces.sort(key=lambda p: -len(p[1]))
    shards: list[list[tuple[int, list[int]]]] = [[] for _ in range(n)]
    load = [0] * n
    for t, vs in pieces:
        i = load.index(min(load))
        shards[i].append((t, vs))
        load[i] += len(vs)
    return [s for s in shards if s]


def build_scienceworld_dataset(out_dir: str | Path, cfg: ScienceWorldDataConfig) -> dict[str, Any]:
    """Build (or resume) the dataset in ``out_dir``; returns the manifest."""
    from metacog_fast.scienceworld.env import resolve_task

    cfg.validate()
    out = Path(out_dir)
    vdir = out / "variations"
    vdir.mkdir(parents=True, exist_ok=True)
    cfg_file = out / "config.json"
    mine = _cfg_dict(cfg)
    if cfg_file.exists():
        old = read_json(cfg_file)
        if {k: v for k, v in old.items() if k != "workers"} != {k: v for k, v in mine.items() if k != "workers"}:
            raise ValueError(f"{cfg_file}: the folder holds a dataset of another configuration; use another folder")
    write_json_atomic(cfg_file, mine)
    t0 = time.perf_counter()
    listing = out / "variations.json"
    per_task = read_json(listing) if listing.is_file() else {}
    missing = [t for t in cfg.tasks if str(t) not in per_task]
    if missing:
        per_task.update(list_variations(missing, cfg.split))
        write_json_atomic(listing, per_task)
    chosen = select_variations(per_task, cfg.tasks, cfg.max_variations)
    names = {t: resolve_task(t) for t in cfg.tasks}
    todo = [(t, v) for t, v in chosen if not (vdir / f"{variation_key(names[t], v)}.json").exists()]
    if todo:
        jobs = [(str(vdir), shard, i) for i, shard in enumerate(_shards(todo, cfg.workers))]
        if len(jobs) == 1:
            _play_shard(jobs[0])
        else:
            with mp.get_context("spawn").Pool(len(jobs)) as pool:
                pool.map(_play_shard, jobs)
    records = [read_json(vdir / f"{variation_key(names[t], v)}.json") for t, v in chosen]
    bad = [r for r in records if r["split"] not in SOURCE_SPLITS]
    if bad:
        raise ValueError(f"{vdir}: records of split {bad[0]['split']!r} found; only {SOURCE_SPLITS} may be a source")
    kept = [r for r in records if r["won"]]
    examples = [e for r in kept for e in examples_of(r)]
    path = out / "dataset.jsonl"
    with atomic_open(path, "w") as f:
        for ex in examples:
            f.write(json.dumps(ex) + "\n")
    manifest = {
        "config": mine,
        "source": SOURCE,
        "examples": len(examples),
        "by_task": dict(Counter(e["task_type"] for e in examples)),
        "variations_played": len(records),
        "variations": [variation_key(r["task_name"], r["variation"]) for r in kept],
        "variations_not_won": [{"variation": variation_key(r["task_name"], r["variation"]), "score": r["score"]}
                               for r in records if not r["won"]],
        "gold_steps": sum(len(r["steps"]) for r in kept),
        "gold_steps_not_admissible": sum(1 for r in kept for s in r["steps"] if not s["admissible"]),
        "gold_steps_unmapped": sum(1 for r in kept for s in r["steps"] if executable_of(s) is None),
        "gold_step_rules": dict(Counter(s.get("rule", "") or "valid" for r in kept for s in r["steps"])),
        "dataset_sha256": sha256_file(path),
        "build_seconds": time.perf_counter() - t0,
    }
    write_json_atomic(out / "manifest.json", manifest)
    return manifest


def _cfg_dict(cfg: ScienceWorldDataConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["tasks"] = list(cfg.tasks)
    d["env"] = "scienceworld"
    return d


__all__ = ["ScienceWorldDataConfig", "SOURCE", "build_scienceworld_dataset", "check_source_variation",
           "examples_of", "play_gold", "select_variations"]
