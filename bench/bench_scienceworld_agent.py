"""Per-step cost of the ScienceWorld agent's own work (everything but the LLM and the simulator),
on real states, against the 5 ms budget; LLM (one Sage call) and environment (one step) timed
separately. Anchor in the same run: the torch reference of the ranker score."""
from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("scienceworld")
from metacog_fast.scienceworld import env as swe  # noqa: E402

if swe.java_version() is None:
    pytest.skip("Java is not installed", allow_module_level=True)

from metacog_fast.scienceworld.amm import AMM, EpisodicRecord, salience  # noqa: E402
from metacog_fast.scienceworld.grounding import Gate1, ValidSet  # noqa: E402
from metacog_fast.scienceworld.runner import collect_gold  # noqa: E402
from metacog_fast.scienceworld.stagnation import Step, stagnation_signals  # noqa: E402
from metacog_fast.scienceworld.swift import (  # noqa: E402
    FeatureCache,
    RankerSwift,
    SwiftState,
    features,
    ranker_scores_reference,
    train_ranker,
)
from metacog_fast.scienceworld.text import room_of  # noqa: E402

BUDGET_S = 0.005


@pytest.fixture(scope="module")
def states():
    ex = collect_gold(0, 1)  # boil: real states with ~400+ valid actions each
    model, _ = train_ranker(ex, epochs=20)
    return ex, model


def _agent_step(swift, gate, amm, ex, traj, i) -> str:
    """The agent's own work of one step: valid set, Swift ranking, Gate-1, stagnation, salience, AMM write."""
    room = room_of(ex.observation)
    vs = ValidSet(ex.valid, room)
    s = SwiftState(ex.task, ex.observation, ex.last_action, ex.valid, ex.executed)
    cand = swift.candidates(s, 6)
    a = gate(cand[0], vs).action or cand[0]
    traj.append(Step(a, ex.observation, 0.0, room))
    stagnation_signals(traj[-6:])
    kind = salience(a, ex.observation, 0.0, False, ex.task)
    if kind is not None and amm is not None and i % 4 == 0:
        amm.write(EpisodicRecord("boil", room, [], a, ex.observation[:200], 0, 0, kind), ex.task)
    return a


def test_agent_step_time(benchmark, states, tmp_path):
    from metacog_fast.memory import MemoryStore

    ex, model = states
    swift = RankerSwift(model)
    gate = Gate1()
    store = MemoryStore.open(tmp_path / "m.sqlite", dim=384, synchronous="NORMAL", num_threads=1)
    amm = AMM(store, "boil")
    traj: list[Step] = []
    for i, e in enumerate(ex):  # warm the per-action feature cache as an episode does
        _agent_step(swift, gate, amm, e, traj, i)
    it = {"i": 0, "cpu": 0.0, "n": 0}

    def one() -> None:
        i = it["i"] = it["i"] + 1
        c0 = time.process_time()
        _agent_step(swift, gate, amm, ex[i % len(ex)], traj, i)
        it["cpu"] += time.process_time() - c0
        it["n"] += 1

    benchmark.pedantic(one, rounds=200, iterations=1, warmup_rounds=5)
    mean = benchmark.stats.stats.mean
    cpu = it["cpu"] / it["n"]  # CPU seconds of this process: the wall clock is inflated on a loaded machine
    # anchor: the torch reference ranker score on the same state, same run
    e = ex[len(ex) // 2]
    C, t, F = features(swift.cache, SwiftState(e.task, e.observation, e.last_action, e.valid, e.executed), e.valid)
    t0 = time.perf_counter()
    for _ in range(50):
        ranker_scores_reference(model, C, t, F)
    ref = (time.perf_counter() - t0) / 50
    t0 = time.perf_counter()
    for _ in range(50):
        model.score(C, t, F)
    fast = (time.perf_counter() - t0) / 50
    store.close()
    benchmark.extra_info.update({
        "valid_actions_mean": float(np.mean([len(x.valid) for x in ex])),
        "agent_step_ms": 1000 * mean, "budget_ms": 1000 * BUDGET_S, "ratio_to_budget": mean / BUDGET_S,
        "agent_step_cpu_ms": 1000 * cpu, "cpu_ratio_to_budget": cpu / BUDGET_S,
        "load_average_1min": __import__("os").getloadavg()[0],
        "ranker_score_numpy_ms": 1000 * fast, "ranker_score_torch_reference_ms": 1000 * ref,
        "speedup_vs_torch_reference": ref / fast,
    })


def test_llm_and_env_step_time(benchmark, states):
    """One Sage call (embedded SmolLM2) and one simulator step, for scale against the agent's own time."""
    from metacog_fast.scienceworld.sage import Sage
    from metacog_fast.envs import make_env
    from metacog_fast.llm import open_llm

    ex, model = states
    swift = RankerSwift(model)
    llm = open_llm(n_threads=1)
    sage = Sage(llm, 24, 2)
    e = ex[0]
    opts = swift.candidates(SwiftState(e.task, e.observation, "", e.valid), 6)
    benchmark.pedantic(lambda: sage.plan(e.task, e.observation, [], [], opts), rounds=3, iterations=1)
    sage_s = benchmark.stats.stats.mean
    env = make_env("scienceworld", task=0, split="train", step_limit=100)
    env.reset(variation=env.variations[0])
    t0 = time.perf_counter()
    n = 10
    for _ in range(n):
        env.step("look around")
    env_s = (time.perf_counter() - t0) / n
    env.close()
    llm.close()
    benchmark.extra_info.update({"sage_call_s": sage_s, "env_step_s": env_s,
                                 "sage_to_agent_budget_ratio": sage_s / BUDGET_S,
                                 "env_step_to_agent_budget_ratio": env_s / BUDGET_S})
