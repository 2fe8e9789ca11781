"""Which Swift is better? Top-1 agreement with the expert on held-out gold steps.

Held-out = train variations the ranker was not trained on (index ``skip`` onwards), so the
comparison is imitation accuracy of the learned ranker vs the LLM's constrained choice.
"""
from __future__ import annotations

import time
from typing import Any

from metacog_fast.agents.scienceworld.swift import GoldExample, LLMSwift, RankerSwift, SwiftState


def heldout_gold(tasks: list[int], skip: int = 1) -> list[GoldExample]:
    """Gold steps of train variation number ``skip`` of each task (not used for training)."""
    from metacog_fast.agents.scienceworld.runner import walk_gold
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


def main(argv: list[str] | None = None) -> int:
    """``python -m metacog_fast.agents.scienceworld.swift_eval RUN --tasks 0,3 --max-steps 60 --out F``."""
    import argparse
    import os
    import random

    from metacog_fast.agents.scienceworld.runner import parse_tasks
    from metacog_fast.agents.scienceworld.store import write_json
    from metacog_fast.agents.scienceworld.swift import RankerModel
    from metacog_fast.llm import open_llm

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("run", help="run folder holding ranker.npz")
    p.add_argument("--tasks", default="0-29")
    p.add_argument("--max-steps", type=int, default=60, help="held-out gold steps sampled at most")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    ex = heldout_gold(parse_tasks(a.tasks))
    random.Random(0).shuffle(ex)
    ex = ex[: a.max_steps]
    llm = open_llm(n_threads=1)
    res = compare(ex, RankerSwift(RankerModel.load(os.path.join(a.run, "ranker.npz"))), LLMSwift(llm))
    llm.close()
    res["tasks"] = a.tasks
    write_json(a.out, res)
    print(res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
