"""The town's game loop (issue 53 item 3): ticks per second, decision latency and stale plans with
5 and 25 agents, with and without metacognition, against the blocking step in the same run.

    METACOG_BENCH_TOWN_LOOP_SECONDS=120 pytest bench/bench_town_loop.py -k "not 25" --benchmark-json=bench/results/town_loop_5.json
    METACOG_BENCH_TOWN_LOOP_SECONDS=300 METACOG_BENCH_TOWN_LOOP_ANCHOR_STEPS=1 \
        pytest bench/bench_town_loop.py -k "25-" --benchmark-json=bench/results/town_loop_25.json

Each case: the party scenario (nobody dies, so the loop runs the whole time: in the zombie town the
zombies, moving every tick, killed all 5 agents within 25 s while they waited for their first
plans), memory, reflection and planning on, metacognition on or off; the embedded SmolLM2-135M through the town's batched SimLLM. The loop (``GameLoop``) runs
``SECONDS`` of wall time paced at ``HZ`` ticks per second; the LLM decodes on all cores but one
(the game's thread keeps a core: ``LLM_THREADS``). Recorded (``extra_info``): the loop's
``stats()`` (ticks per second achieved and tick time p50/p95, decision latency p50/p95 overall and
per agent, share of agent-ticks on a stale plan, rounds), the LLM's calls and seconds, and the
anchor: ``Simulation.step()`` on a second copy of the same scenario, which waits for every agent's
decision before anyone moves (``ANCHOR_STEPS`` steps; its steps per second are the ticks per
second a game built on it would get). Ratio: loop ticks/s over blocking steps/s.
Targets (issue 53): >= 10 ticks/s with 25 agents and decision p95 <= 5 s.
"""
from __future__ import annotations

import os
import time

import pytest

from metacog_fast.town import load_scenario
from metacog_fast.town.engine import SimConfig, Simulation
from metacog_fast.town.game_loop import GameLoop
from metacog_fast.town.generative import Features

HZ = 10.0
SECONDS = float(os.environ.get("METACOG_BENCH_TOWN_LOOP_SECONDS", 60))
ANCHOR_STEPS = int(os.environ.get("METACOG_BENCH_TOWN_LOOP_ANCHOR_STEPS", 3))
LLM_THREADS = max(1, len(os.sched_getaffinity(0)) - 1)


@pytest.fixture(scope="module")
def encoder():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from metacog_fast.scoring.encoder import MiniLMEncoder

    return MiniLMEncoder()


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("llama_cpp")
    from metacog_fast.llm import open_llm

    b = open_llm(n_threads=LLM_THREADS)
    yield b
    b.close()


def _sim(tmp_path, name, backend, encoder, agents: int, metacognition: bool) -> Simulation:
    from metacog_fast.town.llm_adapter import SimLLM

    feats = Features(memory=True, reflection=True, planning=True, metacognition=metacognition)
    sc = load_scenario("party", n_agents=agents, seed=0, steps=10**6)
    return Simulation(sc, SimLLM(backend, batched=True), encoder, str(tmp_path / name), SimConfig(features=feats))


@pytest.mark.parametrize("metacognition", [False, True], ids=["no-meta", "meta"])
@pytest.mark.parametrize("agents", [5, 25])
def test_game_loop(benchmark, tmp_path, torch_threads, backend, encoder, agents, metacognition):
    torch_threads(1)
    sim = _sim(tmp_path, "loop", backend, encoder, agents, metacognition)
    ticks = int(SECONDS * HZ)
    try:
        with GameLoop(sim) as loop:
            benchmark.pedantic(loop.run, args=(ticks,), kwargs={"hz": HZ}, rounds=1, iterations=1)
            stats = loop.stats()
        wall = benchmark.stats.stats.max
        llm = sim.llm.cost.as_dict()
        alive = sum(a.alive for a in sim.agents)
        meta = sim.meta_counts()
    finally:
        sim.close()

    anchor = _sim(tmp_path, "anchor", backend, encoder, agents, metacognition)
    try:
        t0 = time.perf_counter()
        for _ in range(ANCHOR_STEPS):
            anchor.step()
        step_s = (time.perf_counter() - t0) / ANCHOR_STEPS
    finally:
        anchor.close()

    benchmark.extra_info.update({
        "agents": agents,
        "metacognition": metacognition,
        "hz": HZ,
        "ticks": stats["ticks"],
        "achieved_ticks_per_second": round(stats["ticks"] / wall, 2),
        "loop": stats,
        "alive_at_end": alive,
        "metacognition_counts": meta,
        "llm_threads": LLM_THREADS,
        "llm_calls": llm["calls"],
        "llm_seconds": llm["seconds"],
        "llm_prompt_tokens": llm["prompt_tokens"],
        "llm_completion_tokens": llm["completion_tokens"],
        "llm_calls_by_purpose": llm["by_purpose"],
        "anchor_blocking_step_seconds": round(step_s, 3),
        "anchor_blocking_steps_per_second": round(1.0 / step_s, 4),
        "ratio_loop_ticks_over_blocking_steps": round((stats["ticks"] / wall) * step_s, 1),
        "target_ticks_per_second": 10.0,
        "target_decision_p95_seconds": 5.0,
        "load_average_1min": round(os.getloadavg()[0], 2),
    })
