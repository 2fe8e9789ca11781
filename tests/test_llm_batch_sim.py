"""The town step on batched LLM rounds (SimLLM(batched=True)) with the embedded model and the
real MiniLM encoder: all agents' decisions go to the backend as one choose_many, all of a step's
importance ratings as one more."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from metacog_fast.town.generative import Features
from metacog_fast.llm import open_llm
from metacog_fast.town import load_scenario
from metacog_fast.town.engine import SimConfig, Simulation
from metacog_fast.town.llm_adapter import SimLLM

N = 6


@pytest.fixture(scope="module")
def encoder():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from metacog_fast.scoring.encoder import MiniLMEncoder

    return MiniLMEncoder()


def test_a_town_step_sends_all_decisions_and_all_ratings_in_one_call_each(tmp_path, encoder):
    backend = open_llm(n_threads=1, batch_n_seq_max=8, batch_n_ctx_seq=1024)
    try:
        llm = SimLLM(backend, batched=True)
        sc = load_scenario("zombie", n_agents=N, seed=0)
        cfg = SimConfig(features=Features(memory=True, reflection=False, planning=False, metacognition=False),
                        llm_workers=2)  # fewer workers than agents: the batched pool still holds them all
        sim = Simulation(sc, llm, encoder, str(tmp_path / "town"), cfg)
        rng = np.random.default_rng(0)
        for a in sim.agents:
            a.mind.target = sim.places[int(rng.integers(len(sim.places)))]
        sim.step()
        kinds = [r.kind for r in backend.history]
        assert "choose" not in kinds and "complete" not in kinds  # nothing one at a time
        cost = llm.cost.as_dict()
        talks = sum(1 for a in sim.agents if a.action.kind == "talk")
        # round 1: every agent's decision (one choose_many); then at most two rounds of conversation lines
        assert 1 <= llm.rounds <= 1 + 2 * (talks > 0)
        assert cost["by_purpose"]["action"] == N
        assert kinds.count("generate_many") == llm.rounds - 1
        decisions = [r for r in backend.history if r.kind == "choose_many"][-1]
        ratings = [r for r in backend.history if r.kind == "choose_many"][:-1]
        assert decisions.n >= 2 * N and sum(r.n for r in ratings) == 10 * cost["by_purpose"]["importance"]
        assert sim.fallbacks == 0 and all(a.action.kind in ("continue", "move", "stay", "flee", "talk", "use")
                                          for a in sim.agents)
        sim.close()
    finally:
        backend.close()


def test_a_round_waits_for_every_registered_worker():
    backend = open_llm(n_threads=1, batch_n_seq_max=4, batch_n_ctx_seq=256)
    try:
        llm = SimLLM(backend, batched=True)
        prompts = ["The capital of France is", "Two plus two is", "The sky is"]
        out: dict[int, int] = {}

        def job(i: int) -> None:
            try:
                out[i] = llm.choose(prompts[i], [" Paris", " four", " blue"], "action")
            finally:
                llm.leave()

        llm.expect(3)
        threads = [threading.Thread(target=job, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert llm.rounds == 1 and backend.history[-1].kind == "choose_many" and backend.history[-1].n == 9
        singles = [backend.choose(p, [" Paris", " four", " blue"]).index for p in prompts]
        assert [out[i] for i in range(3)] == singles == [0, 1, 2]
    finally:
        backend.close()
