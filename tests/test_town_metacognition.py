"""Metacognition that can act (issue 53, item 2): a progress rating whose inputs have not changed
since the last one is skipped (it cannot come out differently or change anything, and costs two
LLM calls), and what each meta_cognize changed (goal, target, strategy, or nothing) is recorded and
counted in the run's metrics. Real embedded LLM (SmolLM2-135M) and MiniLM encoder."""
from __future__ import annotations

import pytest

from metacog_fast.town import load_scenario
from metacog_fast.town.engine import SimConfig, Simulation
from metacog_fast.town.generative import Action, AgentConfig, Features, GenerativeAgent, StepContext
from metacog_fast.town.llm_adapter import SimLLM


@pytest.fixture(scope="module")
def llm():
    pytest.importorskip("llama_cpp")
    from metacog_fast.llm import open_llm

    backend = open_llm()  # threads: the cores this process may use
    yield SimLLM(backend)
    backend.close()


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    from metacog_fast.scoring.encoder import MiniLMEncoder

    s = Simulation(load_scenario("zombie", n_agents=1), None, MiniLMEncoder(), str(tmp_path_factory.mktemp("meta")),
                   SimConfig(use_llm=False))
    yield s
    s.close()


def _ctx(step: int, places: list[str], notices: list[str]) -> StepContext:
    return StepContext(step=step, now=step * 10.0, clock=f"08:{step:02d}", place="Park",
                       premise="A zombie apocalypse has started in town.", notices=notices, memories=[],
                       options=[Action("stay", "stay where I am"), Action("move", "go to the Bunker", "Bunker")],
                       places=places, meta_questions=["Where should I go for safety?"],
                       controls=[Action("keep", "keep going with my current plan"),
                                 Action("move", "go to the Bunker", "Bunker")])


FEATS = Features(memory=False, reflection=False, planning=False, metacognition=True)


def test_a_rating_with_nothing_new_is_skipped(llm, sim):
    ben = GenerativeAgent("Ben", "Ben is a student.", "brave", "stay alive", "survivor", (3, 12), FEATS,
                          AgentConfig(progress_every=2, progress_threshold=1))  # never below: no meta_cognize
    llm.reset()
    seen = ["2 zombies near the Park"]
    d = ben.think(_ctx(2, sim.places, seen), llm, None)
    ben.apply(d, 2)
    # control mode: the rating is the score alone, one call (AgentConfig.progress_reason)
    assert [k for k, _ in d.events] == ["progress"] and llm.cost.by_purpose["progress"] == 1
    d = ben.think(_ctx(4, sim.places, seen), llm, None)  # same goal, target and notices: the clock moved only
    ben.apply(d, 4)
    assert [k for k, _ in d.events] == ["progress_skipped"] and llm.cost.by_purpose["progress"] == 1
    d = ben.think(_ctx(6, sim.places, seen + ["Ada is at the Park"]), llm, None)
    assert [k for k, _ in d.events] == ["progress"] and llm.cost.by_purpose["progress"] == 2


def test_what_meta_cognize_changed_is_counted(llm, sim):
    ada = sim.agents[0]
    ada.features, ada.config = FEATS, AgentConfig(progress_every=2, progress_threshold=11,  # always below
                                                  meta_mode="prose")
    ada.mind.goal, ada.mind.target = "", None
    d = ada.think(_ctx(2, sim.places, ["2 zombies near the Park"]), llm, None)
    assert d.metacognized
    ada.apply(d, 2)
    changed = [t for k, t in d.events if k == "meta_changed"]
    assert len(changed) == 1 and "goal" in changed[0] and "target" in changed[0]  # had neither
    m = sim.metrics()["metacognition"]
    assert m["ratings"] == 1 and m["ratings_skipped"] == 0 and m["meta_cognize"] == 1
    assert m["changed_goal"] == 1 and m["changed_target"] == 1 and m["changed_nothing"] == 0
