"""The town's game loop (``metacog_fast.town.game_loop``): ``tick()`` never waits on the LLM,
decisions arrive from a background round and are applied at the next tick, an arrived action whose
premise is gone is not executed, and the tick's memories reach the store. Real embedded LLM
(SmolLM2-135M through llama.cpp) and MiniLM encoder; the LLM is held back with a gate where a test
needs a round to stay in flight."""
from __future__ import annotations

import threading
import time

import pytest

from metacog_fast.town import load_scenario
from metacog_fast.town.engine import SimConfig, Simulation
from metacog_fast.town.game_loop import GameLoop, LoopConfig
from metacog_fast.town.generative import Action, Features
from metacog_fast.town.llm_adapter import SimLLM


@pytest.fixture(scope="module")
def encoder():
    from metacog_fast.scoring.encoder import MiniLMEncoder

    return MiniLMEncoder()


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("llama_cpp")
    from metacog_fast.llm import open_llm

    b = open_llm()
    yield b
    b.close()


class GatedLLM(SimLLM):
    """The town's batched SimLLM whose rounds wait until ``gate`` is set (the model is the real one)."""

    def __init__(self, llm, gate: threading.Event) -> None:
        super().__init__(llm, batched=True)
        self.gate = gate

    def _run_round(self, batch):
        assert self.gate.wait(300), "the test never opened the gate"
        super()._run_round(batch)


def _wait_for(cond, seconds: float = 300.0) -> None:
    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, "timed out waiting for the decider"
        time.sleep(0.01)


def test_ticks_go_on_while_the_model_is_busy_and_decisions_land_afterwards(tmp_path, encoder, backend):
    gate = threading.Event()
    llm = GatedLLM(backend, gate)
    feats = Features(memory=True, reflection=False, planning=True, metacognition=False)
    sim = Simulation(load_scenario("zombie", n_agents=3, seed=0, steps=50), llm, encoder, str(tmp_path),
                     SimConfig(features=feats))
    sim.horde.pos = sim.horde.pos[:0]  # nobody dies: every agent owes a decision on every tick
    try:
        with GameLoop(sim) as loop:
            try:
                first = loop.tick()
                assert first.requested == 3 and first.applied == 0
                for _ in range(20):  # the round is held at the gate: every tick returns anyway
                    st = loop.tick()
                    assert st.applied == 0 and st.requested == 0 and st.stale == 3
                assert sim.step_no == 21 and loop.counters.round_sizes == []
                gate.set()
                _wait_for(lambda: loop.counters.round_sizes)
                st = loop.tick()
                assert st.applied == 3 and st.requested == 3  # applied, and each asks for its next decision
                s = loop.stats()
                assert s["decisions"] == 3 and s["decision_ticks_p50"] == 21 and s["rounds"] == 1
                assert s["decisions_per_round"] == 3
                assert all(a.mind.plan and a.mind.target in sim.places for a in sim.agents)  # the plans arrived
                assert all(any(e["kind"] == "plan" for e in a.timeline) for a in sim.agents)
                assert 0 < s["stale_share"] < 1 and set(s["decision_seconds_per_agent"]) == {a.name for a in sim.agents}
                # the plans' memories went to the decider with the tick and are committed by the next round
                _wait_for(lambda: len(loop.counters.round_sizes) >= 2)
                assert len(sim.store) > 0
                assert any("plans to" in t for t in sim.memory.texts.values())
                loop.run(3)
            finally:
                gate.set()  # a failed assertion must not leave the decider waiting at the gate
    finally:
        sim.close()
    assert llm.rounds >= 2 and llm.cost.calls > 0


def test_an_arrived_action_whose_premise_is_gone_is_not_executed(tmp_path, encoder):
    sim = Simulation(load_scenario("mystery", n_agents=3, seed=0), None, encoder, str(tmp_path), SimConfig(use_llm=False))
    try:
        loop = GameLoop(sim)
        a, b, c = sim.agents
        b.pos = a.pos
        assert loop._still_possible(a, Action("attack", "attack", b.name))
        assert loop._still_possible(a, Action("talk", "talk", b.name))
        far = max(((x, y) for y in range(sim.world.height) for x in range(sim.world.width)
                   if sim.world.walkable[y, x]), key=lambda p: (p[0] - a.pos[0]) ** 2 + (p[1] - a.pos[1]) ** 2)
        b.pos = far
        assert not loop._still_possible(a, Action("attack", "attack", b.name))  # out of reach now
        assert not loop._still_possible(a, Action("talk", "talk", b.name))
        assert loop._still_possible(a, Action("follow", "follow", b.name))  # follow goes after them
        b.alive = False
        assert not loop._still_possible(a, Action("follow", "follow", b.name))
        assert not loop._still_possible(a, Action("invite", "invite", "nobody"))
        assert loop._still_possible(a, Action("stay", "stay"))
        a.mind.target = sim.places[0]
        assert loop._keep_plan(a) == Action("continue", "continue", sim.places[0])
        loop.close()
    finally:
        sim.close()


def test_without_a_model_agents_follow_their_plans_and_nothing_is_requested(tmp_path, encoder):
    sim = Simulation(load_scenario("zombie", n_agents=2, seed=1), None, encoder, str(tmp_path), SimConfig(use_llm=False))
    try:
        with GameLoop(sim) as loop:
            target = sim.places[-1]
            sim.agents[0].mind.target = target
            start = sim.agents[0].pos
            loop.run(5)
            assert sim.step_no == 5 and loop.stats()["decisions"] == 0 and loop.stats()["stale_share"] == 0
            assert sim.agents[0].pos != start or sim.place_of(start) == target
            assert len(sim.frames) == 6
    finally:
        sim.close()


def test_a_seeking_intention_is_carried_out_on_the_game_thread(tmp_path, encoder):
    """A control's intention needs no model: the host walks to where Omar was last seen and invites
    him on sight, tick by tick, with nothing requested of a decider."""
    sim = Simulation(load_scenario("party", n_agents=5, seed=0), None, encoder, str(tmp_path), SimConfig(use_llm=False))
    try:
        hana, omar = sim.by_name["Hana"], sim.by_name["Omar"]
        for a in sim.agents:
            a.pos = sim.world.cells_of("Cafe" if a is hana else "Shop" if a is omar else "Library")[0]
        hana.last_seen["Omar"] = ("Shop", 0, omar.pos)
        hana.mind.seek, hana.mind.seek_for, hana.mind.seek_since = "Omar", "invite", 0
        with GameLoop(sim) as loop:
            for _ in range(15):
                loop.tick()
                if hana.mind.seek is None:
                    break
            assert "Omar" in sim.invited and sim.intentions["found"] == 1
            assert loop.stats()["decisions"] == 0
    finally:
        sim.close()


def test_arguments_are_checked(tmp_path, encoder):
    with pytest.raises(ValueError, match="decide_every"):
        LoopConfig(decide_every=0)
    with pytest.raises(ValueError, match="max_round"):
        LoopConfig(max_round=0)
    with pytest.raises(ValueError, match="rated_per_round"):
        LoopConfig(rated_per_round=-1)
    import gc

    assert gc.get_freeze_count() == 0
    sim = Simulation(load_scenario("zombie", n_agents=2), None, encoder, str(tmp_path), SimConfig(use_llm=False,
                                                                                                  step_budget=1.0))
    try:
        with pytest.raises(ValueError, match="step_budget"):
            GameLoop(sim)
    finally:
        sim.close()
    sim = Simulation(load_scenario("zombie", n_agents=2), None, encoder, str(tmp_path / "b"), SimConfig(use_llm=False))
    try:
        with GameLoop(sim) as loop:  # freezes what exists now out of the collector's view, until close
            assert gc.get_freeze_count() > 0
            with pytest.raises(ValueError, match="ticks"):
                loop.run(-1)
            with pytest.raises(ValueError, match="hz"):
                loop.run(1, hz=0)
        assert gc.get_freeze_count() == 0
        with GameLoop(sim, LoopConfig(freeze_gc=False)):
            assert gc.get_freeze_count() == 0
    finally:
        sim.close()


def test_a_round_rates_at_most_its_share_of_new_memories(tmp_path, encoder):
    from metacog_fast.town.generative.memory import PendingMemory

    sim = Simulation(load_scenario("zombie", n_agents=2), None, encoder, str(tmp_path), SimConfig(use_llm=False))
    try:
        asked: list[list[str]] = []
        sim.memory.rate = lambda pairs: asked.append([t for _, t in pairs]) or [9] * len(pairs)
        items = [PendingMemory("Ada", f"memory {i}", "observation", "Park") for i in range(5)]
        assert sim.memory.importance(items, max_rated=2) == [3.0, 3.0, 3.0, 9.0, 9.0]  # the newest two
        assert asked == [["memory 3", "memory 4"]]
        assert sim.memory.importance(items, max_rated=0) == [3.0, 3.0, 3.0, 9.0, 9.0] and len(asked) == 1
        assert sim.memory.importance(items) == [9.0] * 5 and asked[-1] == ["memory 0", "memory 1", "memory 2"]
    finally:
        sim.close()
