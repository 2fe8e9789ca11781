"""Which Swift is better? Top-1 agreement with the expert on held-out gold steps.

Held-out = train variations the ranker was not trained on (index ``skip`` onwards), so the
comparison is imitation accuracy of the learned ranker vs the LLM's constrained choice.
``metacog report scienceworld-swift RUN --tasks 0,3 --out F``.

:func:`dev_gold` and :func:`top1_agreement` measure any number of proposers on gold steps of
``dev`` variations (never a training source), with Wilson intervals; the fine-tuned Swift is
measured that way (``metacog finetune swift-eval``, :mod:`metacog_fast.scienceworld.finetune_eval`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from metacog_fast.scienceworld.swift import GoldExample, LLMSwift, RankerSwift, SwiftState


def heldout_gold(tasks: list[int], skip: int = 1) -> list[GoldExample]:
    """Gold steps of train variation number ``skip`` of each task (not used for training)."""
    from metacog_fast.scienceworld.runner import walk_gold
    from metacog_fast.envs import make_env

    out: list[GoldExample] = []
    for task in tasks:
        env = make_env("scienceworld", task=task, split="train", step_limit=200)
        try:
            vs = env.variations
            out.extend(walk_gold(env, vs[skip % len(vs)]))
        finally:
            env.close()
    return out


def dev_gold(tasks: list[int], variations: int = 1, steps_per_task: int | None = None, seed: int = 0
             ) -> list[tuple[str, int, GoldExample]]:
    """(task name, variation, gold step) of the first ``variations`` dev variations of each task,
    walked in the simulator; at most ``steps_per_task`` steps per task (a seeded sample, kept in
    path order), so that every task weighs the same."""
    import random

    from metacog_fast.scienceworld.runner import SIMULATOR_STEP_LIMIT, walk_gold
    from metacog_fast.envs import make_env

    out: list[tuple[str, int, GoldExample]] = []
    for task in tasks:
        env = make_env("scienceworld", task=task, split="dev", step_limit=SIMULATOR_STEP_LIMIT)
        try:
            steps = [(env.task, v, ex) for v in env.variations[:variations] for ex in walk_gold(env, v)]
        finally:
            env.close()
        if steps_per_task is not None and len(steps) > steps_per_task:
            keep = sorted(random.Random(f"{seed}/{task}").sample(range(len(steps)), steps_per_task))
            steps = [steps[i] for i in keep]
        out.extend(steps)
    return out


def top1_agreement(examples: list[GoldExample], proposers: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per proposer (anything with ``propose(SwiftState) -> str``): the proposals, top-1 agreement
    with the gold action (Wilson 95 % interval), milliseconds per proposal and, for a proposer with
    ``candidates``/``k`` (the LLM Swift), how often the gold action was among its options."""
    from metacog_fast.metrics import rate_with_interval

    if not examples:
        raise ValueError("examples: no held-out gold steps")
    out: dict[str, dict[str, Any]] = {}
    for name, sw in proposers.items():
        hits, inside, picks, secs = [], [], [], 0.0
        for ex in examples:
            s = SwiftState(ex.task, ex.observation, ex.last_action, ex.valid, ex.executed)
            t0 = time.perf_counter()
            a = sw.propose(s)
            secs += time.perf_counter() - t0
            picks.append(a)
            hits.append(a == ex.gold)
            if hasattr(sw, "k"):
                inside.append(ex.gold in sw.candidates(s, sw.k))
        res: dict[str, Any] = {"top1": rate_with_interval(hits), "ms_per_step": 1000 * secs / len(examples),
                               "proposals": picks, "hits": hits}
        if inside:
            res["gold_in_options"] = rate_with_interval(inside)
        out[name] = res
    return out


def compare(examples: list[GoldExample], ranker: RankerSwift, llm_swift: LLMSwift) -> dict[str, Any]:
    """Top-1 accuracy of both proposers on ``examples``, plus seconds per proposal."""
    if not examples:
        raise ValueError("examples: no held-out gold steps")
    hits = {"ranker": 0, "llm": 0}
    secs = {"ranker": 0.0, "llm": 0.0}
    in_llm_options = 0
    for ex in examples:
        s = SwiftState(ex.task, ex.observation, ex.last_action, ex.valid, ex.executed)
        for name, sw in (("ranker", ranker), ("llm", llm_swift)):
            t0 = time.perf_counter()
            a = sw.propose(s)
            secs[name] += time.perf_counter() - t0
            hits[name] += int(a == ex.gold)
        in_llm_options += int(ex.gold in llm_swift.candidates(s, llm_swift.k))
    n = len(examples)
    return {"steps": n, "ranker_top1": hits["ranker"] / n, "llm_top1": hits["llm"] / n,
            "llm_gold_in_options": in_llm_options / n,
            "ranker_ms_per_step": 1000 * secs["ranker"] / n, "llm_ms_per_step": 1000 * secs["llm"] / n}


@dataclass
class SwiftEvalConfig:
    """Which held-out gold steps the two Swift proposers are compared on."""

    tasks: list[int] = field(default_factory=lambda: list(range(30)))
    """Task indices (0-29) whose held-out train variation supplies gold steps."""
    max_steps: int = 60
    """Held-out gold steps sampled at most (shuffled with seed 0)."""

    def validate(self) -> "SwiftEvalConfig":
        if not self.tasks or any(not 0 <= t < 30 for t in self.tasks):
            raise ValueError(f"tasks: expected indices in 0..29, got {self.tasks}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps: expected >= 1, got {self.max_steps}")
        return self


def evaluate_swift(run: str, cfg: SwiftEvalConfig, out: str) -> dict[str, Any]:
    """The run's trained ranker (``run/ranker.npz``) vs the LLM Swift on held-out gold steps of
    ``cfg.tasks``; writes ``out`` (JSON) and returns it."""
    import os
    import random

    from metacog_fast.scienceworld.store import write_json
    from metacog_fast.scienceworld.swift import RankerModel
    from metacog_fast.llm import open_llm

    cfg.validate()
    ranker_path = os.path.join(run, "ranker.npz")
    if not os.path.isfile(ranker_path):
        raise FileNotFoundError(f"run: no trained ranker at {ranker_path}")
    ex = heldout_gold(cfg.tasks)
    random.Random(0).shuffle(ex)
    ex = ex[: cfg.max_steps]
    llm = open_llm(n_threads=1)
    try:
        res = compare(ex, RankerSwift(RankerModel.load(ranker_path)), LLMSwift(llm))
    finally:
        llm.close()
    res["tasks"] = list(cfg.tasks)
    write_json(out, res)
    return res
