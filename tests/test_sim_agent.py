"""The generative agent with the real embedded LLM (SmolLM2-135M via llama.cpp) and the
real MiniLM encoder: progress self-rating triggering meta_cognize below the threshold,
questions changing over time, meta memories retrieved, the step time budget, the judge."""
from __future__ import annotations

import json

import pytest

from metacog_fast.town.generative import Action, AgentConfig, Features, GenerativeAgent, StepContext
from metacog_fast.town import load_scenario
from metacog_fast.town.engine import SimConfig, Simulation
from metacog_fast.town.evaluation import CRITERIA, choose_without_position_bias, culprit_named, judge
from metacog_fast.town.llm_adapter import SimLLM


@pytest.fixture(scope="module")
def llm():
    pytest.importorskip("llama_cpp")
    from metacog_fast.llm import open_llm

    backend = open_llm()  # threads: the cores this process may use
    yield SimLLM(backend)
    backend.close()


@pytest.fixture(scope="module")
def encoder():
    from metacog_fast.scoring.encoder import MiniLMEncoder

    return MiniLMEncoder()


def _ctx(step: int, places: list[str]) -> StepContext:
    return StepContext(step=step, now=step * 10.0, clock="08:00", place="Park",
                       premise="A zombie apocalypse has started in town.",
                       notices=["2 zombies near the Park"], memories=["Ada noticed: 2 zombies near the Park"],
                       options=[Action("stay", "stay where I am"), Action("move", "go to the Bunker", "Bunker")],
                       places=places, meta_questions=["How can I survive this zombie apocalypse?",
                                                      "Where should I go for safety?"])


def test_progress_rating_below_threshold_triggers_meta_cognize(tmp_path, llm, encoder):
    sim = Simulation(load_scenario("zombie", n_agents=1), None, encoder, str(tmp_path), SimConfig(use_llm=False))
    feats = Features(memory=True, reflection=False, planning=False, metacognition=True)
    always = GenerativeAgent("Ada", "Ada is a nurse.", "calm", "", "survivor", (3, 12), feats,
                             AgentConfig(progress_every=2, progress_threshold=11,  # every rating (1-10) is below 11
                                         meta_mode="prose"))
    llm.reset()
    d1 = always.think(_ctx(2, sim.places), llm, sim.memory)
    assert d1.metacognized
    kinds = [k for k, _ in d1.events]
    assert kinds[0] == "progress" and "meta" in kinds and "strategy" in kinds
    assert 1 <= d1.mind.progress[-1][1] <= 10
    meta = [m for m in d1.memories if m.kind == "meta"]
    assert any("rated own progress" in m.text for m in meta) and any("asked themself" in m.text for m in meta)
    assert d1.mind.goal  # started without a goal: meta_cognize sets one
    assert d1.mind.target in sim.places
    assert always.mind.goal == "" and not always.mind.asked  # think works on a copy until applied
    always.apply(d1, 2)
    # the answers are meta memories that retrieval brings back for the question
    sim.memory.commit(d1.memories, 20.0)
    q = always.mind.asked[-1]
    got = sim.memory.retrieve_kinds("Ada", sim.memory.encoder.encode([q]), 3, 30.0)[0]
    assert any(kind == "meta" and q in text for kind, text in got)
    # the next session asks questions it has not asked in the previous one
    d2 = always.think(_ctx(4, sim.places), llm, sim.memory)
    new = d2.mind.asked[len(d1.mind.asked):]
    assert new and not set(new) & set(d1.mind.asked[-2:])
    # with a threshold of 1 no rating is below it: progress is rated, meta_cognize does not run
    never = GenerativeAgent("Ben", "Ben is a student.", "brave", "stay alive", "survivor", (3, 12), feats,
                            AgentConfig(progress_every=2, progress_threshold=1, meta_mode="prose"))
    d3 = never.think(_ctx(2, sim.places), llm, sim.memory)
    assert [k for k, _ in d3.events] == ["progress"] and not d3.metacognized
    assert d3.mind.goal == "stay alive"
    assert llm.cost.by_purpose["progress"] == 6 and llm.cost.calls > 10
    sim.close()


def test_control_meta_cognize_changes_what_the_agent_does_in_three_calls(tmp_path, llm, encoder):
    """Control mode: a rating without a generated reason, one seed question answered from memory, one
    choice among the controls, and the
    chosen control in the mind; an intention then takes the agent's steps with no model call. A
    context without controls skips the rating (nothing it could change)."""
    sim = Simulation(load_scenario("zombie", n_agents=1), None, encoder, str(tmp_path), SimConfig(use_llm=False))
    feats = Features(memory=True, reflection=False, planning=False, metacognition=True)
    controls = [Action("keep", "keep going with my current plan"), Action("move", "go to the Bunker", "Bunker"),
                Action("seek", "find Ben (last seen at the Cafe) and ask for help", "Ben", "talk")]
    ada = GenerativeAgent("Ada", "Ada is a nurse.", "calm", "survive", "survivor", (3, 12), feats,
                          AgentConfig(progress_every=2, progress_threshold=11))
    llm.reset()
    ctx = _ctx(2, sim.places)
    ctx.controls = controls
    d = ada.think(ctx, llm, sim.memory)
    kinds = [k for k, _ in d.events]
    assert d.metacognized and kinds[:2] == ["progress", "meta"] and "control" in kinds
    assert "strategy" not in kinds and "goal" not in kinds  # no prose rewritten
    assert llm.cost.by_purpose["meta"] == 3  # the answer, the choice, the options' bare likelihoods
    # in control mode the rating is the score alone: no generated reason (one call, not two)
    assert llm.cost.by_purpose["progress"] == 1
    assert any(m.kind == "meta" and m.text.endswith("rated own progress toward the goal 'survive' "
                                                     f"{d.mind.progress[-1][1]}/10") for m in d.memories)
    assert list(ada._bare_lp) == [tuple(c.label for c in controls)]
    chosen = next(t for k, t in d.events if k == "control")
    pick = next(c for c in controls if chosen == f"{c.kind}: {c.label}")
    assert any(m.kind == "meta" and f"decided to {pick.label}" in m.text for m in d.memories)
    if pick.kind == "move":
        assert d.mind.target == "Bunker" and d.mind.seek is None
    elif pick.kind == "seek":
        assert (d.mind.seek, d.mind.seek_for) == ("Ben", "talk") and d.action.kind == "seek"
    # an intention: the next step's action is the simulation's, no action choice is asked of the model
    ada.apply(d, 2)
    ada.mind.seek, ada.mind.seek_for, ada.mind.seek_since = "Ben", "talk", 2
    before = llm.cost.calls
    d2 = ada.think(_ctx(3, sim.places), llm, sim.memory)
    assert d2.action == Action("seek", "look for Ben", "Ben", "talk") and llm.cost.calls == before
    # the intention ended (the simulation sets rethink): the next decision chooses again, off the cadence
    ada.mind.seek, ada.mind.rethink = None, True
    ctx5 = _ctx(5, sim.places)
    ctx5.controls = controls
    d4 = ada.think(ctx5, llm, sim.memory)
    assert d4.metacognized and [k for k, _ in d4.events][:2] == ["rethink", "meta"] and not d4.mind.rethink
    # nothing to control: the rating is skipped
    ada.mind.seek, ada.mind.rethink = None, False
    d3 = ada.think(_ctx(4, sim.places), llm, sim.memory)
    assert ("progress_skipped", "no control option to change") in d3.events and not d3.metacognized
    sim.close()


def test_step_budget_agents_continue_their_plan(tmp_path, llm, encoder):
    sc = load_scenario("zombie", n_agents=3, seed=1)
    sim = Simulation(sc, llm, encoder, str(tmp_path), SimConfig(step_budget=0.001, llm_workers=3))
    sim.horde.pos = sim.horde.pos[:0]
    for a, place in zip(sim.agents, ("Bunker", "Hospital", "Shop")):
        a.mind.target = place
    before = [a.pos for a in sim.agents]
    sim.step()
    assert sim.late >= 2 and sim.fallbacks >= 2  # one job may have finished; the serialised others cannot
    fields = [sim.world.location_field(p) for p in ("Bunker", "Hospital", "Shop")]
    for a, b, f in zip(sim.agents, before, fields):
        if a.action.kind == "continue":
            assert f[a.pos[1], a.pos[0]] < f[b[1], b[0]]  # walked toward the plan's target
    sim.close()


def test_judge_saves_prompts_and_scores(tmp_path, llm, encoder):
    sim = Simulation(load_scenario("zombie", n_agents=2), None, encoder, str(tmp_path), SimConfig(use_llm=False))
    sim.run(2)
    run = json.load(open(sim.save()))
    sim.close()
    answers = [{"agent": "Ada", "question": "Did you accomplish your goal?", "answer_type": "yesno", "answer": "no"}]
    res = judge(llm, run, answers)
    assert set(CRITERIA) <= set(res)
    for c in CRITERIA:
        assert 1 <= res[c]["score"] <= 10 and CRITERIA[c] in res[c]["prompt"] and len(res[c]["logprobs"]) == 10
        # the score is the expected rating over the ten answers, rounded (not the argmax)
        assert res[c]["score"] == min(10, max(1, round(res[c]["expected"])))
    assert res["mean"] == sum(res[c]["score"] for c in CRITERIA) / 5


def test_culprit_metric():
    ans = [{"agent": "Iris", "answer_type": "agents", "answer": "Victor"},
           {"agent": "Gus", "answer_type": "agents", "answer": "Iris"},
           {"agent": "Victor", "answer_type": "agents", "answer": "Gus"},
           {"agent": "Gus", "answer_type": "text", "answer": "Victor"}]
    assert culprit_named(ans, "Victor") == {"asked": 2, "named_culprit": ["Iris"], "rate": 0.5}
    ans[0]["probabilities"] = {"Victor": 0.7, "Gus": 0.2, "Kai": 0.1}
    ans[1]["probabilities"] = {"Victor": 0.1, "Iris": 0.5, "Kai": 0.4}
    m = culprit_named(ans, "Victor")
    assert m["probability"] == pytest.approx(0.4) and m["chance"] == pytest.approx(1 / 3)


class _FirstLetterLLM:
    """Content-blind: prefers the first letter, whatever it names (a pure position bias)."""

    def choice(self, prompt, options, purpose):
        from metacog_fast.llm.types import Choice

        return Choice(0, [-0.1 - 2.0 * i for i in range(len(options))])


def test_a_pure_position_bias_names_nobody():
    """The mystery lists the murderer first: one fixed order credited every agent with naming him.
    Averaged over every cyclic order, a letter preference is spread evenly over the people."""
    ans, probs = choose_without_position_bias(_FirstLetterLLM(), "Who?", ["Victor", "Iris", "Gus", "Kai"], "Ada", "t")
    assert ans is None and probs == pytest.approx({n: 0.25 for n in ("Victor", "Iris", "Gus", "Kai")}, abs=1e-6)
    with pytest.raises(ValueError, match="people: expected at least one name"):
        choose_without_position_bias(_FirstLetterLLM(), "Who?", [], "Ada", "t")


def test_debiased_choice_with_the_real_model_does_not_depend_on_where_the_list_starts(llm):
    prompt = ("A quiet evening in town. Someone is a murderer.\nIris remembers:\n- Victor was seen with a bloody "
              "knife\n- Victor ran from the body\nInterviewer: Who do you suspect is the murderer?\nIris:")
    people = ["Gus", "Victor", "Kai", "Tara"]
    ans, probs = choose_without_position_bias(llm, prompt, people, "Iris", "interview")
    ans2, probs2 = choose_without_position_bias(llm, prompt, people[2:] + people[:2], "Iris", "interview")
    assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5)
    # llama.cpp's prompt cache moves logprobs a little between calls (up to ~0.006 in probability
    # measured here); in one fixed order whoever is listed first gets ~0.8.
    assert probs2 == pytest.approx(probs, abs=0.02)
    assert ans == max(probs, key=probs.get) and ans2 == max(probs2, key=probs2.get)


def test_ratings_are_complete_answers_and_use_the_whole_distribution():
    """" 10" is " 1" then "0": the answers end with a newline so 10 can win, and the rating is the
    expected value over the ten answers, so the embedded model's ratings order memories sensibly."""
    from metacog_fast.town.generative import prompts as P
    from metacog_fast.llm import open_llm
    from metacog_fast.town.llm_adapter import RATINGS, rating_from

    assert RATINGS[0] == " 1\n" and RATINGS[-1] == " 10\n" and not any(a.startswith(b) for a in RATINGS for b in RATINGS if a != b)
    assert rating_from([0.0] * 9 + [50.0]) == 10 and rating_from([50.0] + [0.0] * 9) == 1
    assert rating_from([0.0] * 10) == 6  # uniform: 5.5 rounds to 6 (round half to even)
    with pytest.raises(ValueError, match="logprobs"):
        rating_from([0.0] * 9)
    llm = open_llm(n_threads=1, n_ctx=1024)
    try:
        mundane = [llm.choose(P.importance("Alice", m), RATINGS).logprobs
                   for m in ("Alice brushed her teeth.", "Alice sat on a chair.")]
        grave = [llm.choose(P.importance("Alice", m), RATINGS).logprobs
                 for m in ("A zombie bit Alice's arm; she is bleeding.", "Alice's house burned down and her family is missing.")]
    finally:
        llm.close()
    from metacog_fast.town.evaluation import expected_rating

    assert max(expected_rating(x) for x in mundane) < min(expected_rating(x) for x in grave)
