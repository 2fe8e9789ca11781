"""Town simulation step time with 25 agents (issue 10 target: <= 10 ms per step outside the LLM).

    pytest bench/bench_sim.py --benchmark-json=bench/results/sim.json

- ``test_step_outside_llm``: 25 agents of the zombie scenario walking to their plans'
  targets with 4 zombies; each round is one step WITHOUT the thinking phase
  (perception, importance lookup, embedding of the step's new memories and queries,
  store add, retrieval, acting, zombies, frame). Anchor, in the same run: the same
  simulation with ``batched=False`` (per-agent perception loops, one encoder call, one
  store add and one retrieval per agent). extra_info: mean ms per phase for both,
  and the ratios. Wall time and the simulation thread's CPU time are both recorded: on a
  shared, loaded machine the wall time mostly measures waiting for a core.
- ``test_step_llm_time``: one step of 25 agents with the embedded SmolLM2-135M choosing
  every agent's action (memory on, so importance ratings of new memories included;
  reflection, planning and metacognition off to isolate one decision per agent). The
  LLM time of the step is reported on its own, per purpose.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from metacog_fast.town.generative import Features
from metacog_fast.town import load_scenario
from metacog_fast.town.engine import SimConfig, Simulation

N_AGENTS = 25
WARMUP = 3
ROUNDS = 20


def _encoder():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from metacog_fast.scoring.encoder import MiniLMEncoder

    return MiniLMEncoder()


def _sim(tmp_path, name: str, batched: bool, encoder, llm=None, features: Features | None = None) -> Simulation:
    sc = load_scenario("zombie", n_agents=N_AGENTS, seed=0)
    cfg = SimConfig(batched=batched, use_llm=llm is not None, features=features or Features())
    sim = Simulation(sc, llm, encoder, str(tmp_path / name), cfg)
    rng = np.random.default_rng(0)
    for a in sim.agents:
        a.mind.target = sim.places[int(rng.integers(len(sim.places)))]
    return sim


def _phase_ms(sim: Simulation, skip: int) -> dict[str, float]:
    tim = sim.timings[skip:]
    out = {k: 1000 * float(np.mean([getattr(t, k) for t in tim])) for k in ("perception", "memory", "embedding", "acting")}
    out["outside_llm"] = 1000 * float(np.mean([t.outside_llm for t in tim]))
    out["outside_llm_median"] = 1000 * float(np.median([t.outside_llm for t in tim]))
    out["cpu_outside_llm"] = 1000 * float(np.mean([t.cpu_outside_llm for t in tim]))
    out["outside_llm_with_embedding"] = out["outside_llm"] + out["embedding"]
    return {k: round(v, 3) for k, v in out.items()}


def test_step_outside_llm(benchmark, tmp_path, torch_threads):
    torch_threads(2)
    batched = _sim(tmp_path, "batched", True, _encoder())
    unbatched = _sim(tmp_path, "unbatched", False, _encoder())
    for _ in range(WARMUP):
        batched.step()
        unbatched.step()

    def both():
        batched.step()
        unbatched.step()  # the anchor, same state, same step

    # the timed function runs both; the per-phase timings of each come from the sims' own clocks
    benchmark.pedantic(both, rounds=ROUNDS, iterations=1)
    b, u = _phase_ms(batched, WARMUP), _phase_ms(unbatched, WARMUP)
    assert [f["agents"] for f in batched.frames] == [f["agents"] for f in unbatched.frames]
    benchmark.extra_info.update({
        "agents": N_AGENTS,
        "alive_at_end": sum(a.alive for a in batched.agents),
        "memories": len(batched.store),
        "batched_ms": b,
        "unbatched_ms": u,
        "target_outside_llm_ms": 10.0,
        "ratio_outside_llm_unbatched_over_batched": round(u["outside_llm"] / b["outside_llm"], 3),
        "ratio_cpu_outside_llm_unbatched_over_batched": round(u["cpu_outside_llm"] / b["cpu_outside_llm"], 3),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "ratio_with_embedding_unbatched_over_batched": round(u["outside_llm_with_embedding"] / b["outside_llm_with_embedding"], 3),
    })
    batched.close()
    unbatched.close()


def test_step_llm_time(benchmark, tmp_path, torch_threads):
    pytest.importorskip("llama_cpp")
    from metacog_fast.llm import open_llm
    from metacog_fast.town.llm_adapter import SimLLM

    torch_threads(2)
    llm = SimLLM(open_llm(n_threads=2))
    sim = _sim(tmp_path, "llm", True, _encoder(), llm,
               Features(memory=True, reflection=False, planning=False, metacognition=False))
    benchmark.pedantic(sim.step, rounds=1, iterations=1)
    t = sim.timings[-1]
    cost = llm.cost.as_dict()
    benchmark.extra_info.update({
        "agents": N_AGENTS,
        "llm_step_s": round(t.llm, 3),
        "importance_llm_s": round(t.importance_llm, 3),
        "outside_llm_ms": round(1000 * t.outside_llm, 3),
        "cpu_outside_llm_ms": round(1000 * t.cpu_outside_llm, 3),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "embedding_ms": round(1000 * t.embedding, 3),
        "llm_calls": cost["calls"],
        "llm_calls_by_purpose": cost["by_purpose"],
        "llm_prompt_tokens": cost["prompt_tokens"],
        "ratio_llm_over_outside_llm": round(t.llm / max(t.outside_llm, 1e-9), 1),
    })
    sim.close()
    llm.llm.close()
