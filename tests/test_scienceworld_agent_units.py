"""ScienceWorld dual-process agent: Gate-1, stagnation detectors, salience gate, Critic budget, ranker."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from metacog_fast.scienceworld.amm import AMM, EpisodicRecord, is_invalid, salience
from metacog_fast.scienceworld.config import CONFIGS, config_for
from metacog_fast.scienceworld.grounding import Gate1, ValidSet, ground, normalise
from metacog_fast.scienceworld.report import group_of, load_episodes
from metacog_fast.scienceworld.runner import RunConfig, parse_tasks
from metacog_fast.scienceworld.stagnation import (
    Step,
    movement_without_new_states,
    repeated_ineffective_action,
    repeated_ineffective_verb,
    repeated_observation,
    stagnation_signals,
)
from metacog_fast.scienceworld.store import write_json
from metacog_fast.scienceworld.swift import (
    HC,
    HT,
    NF,
    FeatureCache,
    GoldExample,
    RankerModel,
    RankerSwift,
    SwiftState,
    features,
    ranker_scores_reference,
    train_ranker,
)

VALID = ["go to kitchen", "open door to kitchen", "pick up metal pot", "focus on substance in metal pot",
         "move metal pot to stove", "activate stove", "teleport to hallway"]


# ---------------------------------------------------------------- Gate-1
@pytest.mark.parametrize("action,expected,rule", [
    ("go to kitchen", "go to kitchen", ""),
    ("Go to the kitchen.", "go to kitchen", "normalise"),
    ("teleport to kitchen", "go to kitchen", "teleport->go"),
    ("go to hallway", "teleport to hallway", "go->teleport"),
    ("open kitchen door", "open door to kitchen", "room door->door to room"),
    ("go to kitchen door", "go to kitchen", "room door->room"),
    ("pick up metal pot in hallway", "pick up metal pot", "strip in <room>"),
    ("pick up metal pott", "pick up metal pot", "spelling"),
])
def test_gate1_repairs_minor_mismatches(action: str, expected: str, rule: str) -> None:
    g = ground(action, ValidSet(VALID, room="hallway"))
    assert g.action == expected
    assert g.status == ("valid" if not rule else "repaired")
    assert g.rule == rule


@pytest.mark.parametrize("action", ["eat banana", "pick up metal pot in kitchen", "activate sink", "", "   ",
                                    "focus on water", "go to bathroom"])
def test_gate1_drops_what_it_cannot_repair(action: str) -> None:
    gate = Gate1()
    g = gate(action, ValidSet(VALID, room="hallway"))
    assert g.action is None and g.status == "dropped"
    assert gate.stats.dropped == 1 and gate.stats.checked == 1


def test_gate1_counts_and_always_valid_commands() -> None:
    gate = Gate1()
    vs = ValidSet(VALID, room="hallway")
    assert gate("look around", vs).status == "valid"
    assert gate("Activate the stove!", vs).action == "activate stove"
    assert gate("dance", vs).action is None
    assert (gate.stats.checked, gate.stats.passed, gate.stats.repaired, gate.stats.dropped) == (3, 1, 1, 1)
    assert normalise("  Pick up THE metal-pot ") == "pick up metal pot"


# ---------------------------------------------------------------- stagnation
def _traj(rows: list[tuple[str, str, float, str | None]]) -> list[Step]:
    return [Step(a, o, d, r) for a, o, d, r in rows]


def test_no_stagnation_on_a_progressing_trajectory() -> None:
    t = _traj([("open door to kitchen", "The door is now open.", 0, "hallway"),
               ("go to kitchen", "You move to the kitchen.", 8, "kitchen"),
               ("pick up metal pot", "You move the metal pot to the inventory.", 0, "kitchen"),
               ("move metal pot to sink", "You move the metal pot to the sink.", 5, "kitchen")])
    assert stagnation_signals(t) == []


def test_repeated_observation_fires() -> None:
    t = _traj([("look around", "The kitchen. You see a stove.", 0, "kitchen"),
               ("look at stove", "A stove, off.", 0, "kitchen"),
               ("look around", "The kitchen. You see a stove.", 0, "kitchen"),
               ("wait", "You wait.", 0, "kitchen"),
               ("look around", "The kitchen. You see a stove.", 0, "kitchen")])
    assert repeated_observation(t)
    assert "repeated_observation" in stagnation_signals(t)
    assert not repeated_observation(t[:4])


def test_repeated_ineffective_action_fires_only_without_progress() -> None:
    bad = _traj([("activate stove", "The stove is on.", 0, "kitchen"), ("wait", "You wait.", 0, "kitchen"),
                 ("activate stove", "It is already on.", 0, "kitchen")])
    good = _traj([("pick up apple", "You pick up an apple.", 5, "kitchen"), ("wait", "You wait.", 0, "kitchen"),
                  ("pick up apple", "You pick up another apple.", 5, "kitchen")])
    assert repeated_ineffective_action(bad)
    assert not repeated_ineffective_action(good)


def test_repeated_verb_fires_on_a_run_of_one_verb() -> None:
    t = _traj([(f"look at {x}", f"It is a {x}.", 0, "kitchen") for x in ("stove", "sink", "fridge", "table")])
    assert repeated_ineffective_verb(t)
    assert not repeated_ineffective_verb(t[:3])
    t[-1] = Step("look at table", "A table.", 3, "kitchen")
    assert not repeated_ineffective_verb(t)


def test_movement_without_new_states() -> None:
    loop = _traj([("go to kitchen", "kitchen", 0, "kitchen"), ("go to hallway", "hallway", 0, "hallway"),
                  ("go to kitchen", "kitchen", 0, "kitchen"), ("go to hallway", "hallway", 0, "hallway"),
                  ("go to kitchen", "kitchen", 0, "kitchen"), ("go to hallway", "hallway", 0, "hallway")])
    assert movement_without_new_states(loop)
    explore = _traj([("go to kitchen", "k", 0, "kitchen"), ("go to hallway", "h", 0, "hallway"),
                     ("go to workshop", "w", 0, "workshop"), ("go to greenhouse", "g", 0, "greenhouse")])
    assert not movement_without_new_states(explore)


# ---------------------------------------------------------------- salience gate
@pytest.mark.parametrize("action,obs,delta,won,expected", [
    ("focus on water", "You focus on the water.", 100, True, "success"),
    ("go to kitchen", "You move to the kitchen.", 8, False, "progress"),
    ("eat stove", "No known action matches that input.", 0, False, "invalid"),
    ("move metal pot to stove", "You move the metal pot to the stove.", 0, False, "near_miss"),
    ("look around", "The hallway.", 0, False, None),
    ("open door to art studio", "The door is now open.", 0, False, None),
    ("move metal pot to stove", "You move the metal pot to the stove.", -3, False, None),
])
def test_salience_gate(action: str, obs: str, delta: float, won: bool, expected: str | None) -> None:
    task = "Your task is to boil water. Put the metal pot on the stove and heat it."
    assert salience(action, obs, delta, won, task) == expected


def test_invalid_marker() -> None:
    assert is_invalid("No known action matches that input.")
    assert not is_invalid("The door is now open.")


def test_amm_writes_and_retrieves(tmp_path) -> None:
    from metacog_fast.memory import MemoryStore

    with MemoryStore.open(tmp_path / "m.sqlite", dim=384, synchronous="NORMAL", num_threads=1) as store:
        amm = AMM(store, "boil", k=2)
        task = "boil water"
        amm.write(EpisodicRecord("boil", "kitchen", ["go to kitchen"], "activate stove", "The stove is on.", 0, 10, "progress"), task)
        amm.write(EpisodicRecord("boil", "kitchen", [], "eat stove", "No known action matches that input.", 10, 10, "invalid"), task)
        AMM(store, "other").write(EpisodicRecord("other", "kitchen", [], "x", "y", 0, 1, "progress"), task)
        recs = amm.retrieve(task, "kitchen", "The stove is on.")
        assert {r.action for r in recs} == {"activate stove", "eat stove"}
        b = AMM.boosts(recs, {"activate stove", "eat stove"}, 2.0)
        assert b == {"activate stove": 2.0, "eat stove": -2.0}
    with pytest.raises(ValueError, match="embed"):
        AMM(None, "t", embed="bert")


# ---------------------------------------------------------------- ranker
@pytest.mark.parametrize("n", [1, 3, 63, 257])
def test_ranker_scores_match_torch_reference(n: int) -> None:
    rng = np.random.default_rng(n)
    model = RankerModel(rng.normal(size=(HC, 2 * HT)).astype(np.float32), rng.normal(size=HC).astype(np.float32),
                        rng.normal(size=NF).astype(np.float32))
    valid = [f"pick up object {i} from table {i % 7}" for i in range(n)]
    s = SwiftState("Your task is to find an object on a table.", "You see a table.", "look around", valid, {valid[0]: 2})
    C, t, F = features(FeatureCache(), s, valid)
    assert C.shape == (n, HC) and t.shape == (2 * HT,) and F.shape == (n, NF)
    ref = ranker_scores_reference(model, C, t, F).numpy()
    np.testing.assert_allclose(model.score(C, t, F), ref, rtol=1e-4, atol=1e-4)
    assert F[0, 2] > 0 and F[0, 3] == 1.0


def test_ranker_gradients_match_finite_differences() -> None:
    rng = np.random.default_rng(0)
    C = torch.tensor(rng.random((5, HC)), dtype=torch.float64)
    t = torch.tensor(rng.random(2 * HT), dtype=torch.float64)
    F = torch.tensor(rng.random((5, NF)), dtype=torch.float64)
    W = torch.tensor(rng.normal(size=(HC, 2 * HT)) * 0.01, requires_grad=True)
    u = torch.tensor(rng.normal(size=HC) * 0.01, requires_grad=True)
    v = torch.tensor(rng.normal(size=NF), requires_grad=True)

    def f(W: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(C @ (W @ t + u) + F @ v, 0)[0]

    assert torch.autograd.gradcheck(lambda u, v: f(W.detach(), u, v), (u, v))


def test_ranker_learns_gold_and_validates(tmp_path) -> None:
    task = "Your task is to boil water."
    valid = ["activate stove", "eat apple", "look at sink", "go to hallway", "open door to hallway", "pick up apple"]
    ex = [GoldExample(task, "You are in the kitchen.", "", valid, {}, "activate stove"),
          GoldExample(task, "The stove is on.", "activate stove", valid, {"activate stove": 1}, "go to hallway")]
    model, stats = train_ranker(ex, epochs=80, negatives=4)
    assert stats["train_top1_sampled"] == 1.0
    sw = RankerSwift(model)
    assert sw.propose(SwiftState(task, "You are in the kitchen.", "", valid)) == "activate stove"
    p = str(tmp_path / "r.npz")
    model.save(p)
    np.testing.assert_array_equal(RankerModel.load(p).W, model.W)
    with pytest.raises(ValueError, match="no gold steps"):
        train_ranker([])
    with pytest.raises(FileNotFoundError, match="ranker"):
        RankerModel.load(str(tmp_path / "missing.npz"))
    with pytest.raises(ValueError, match="ranker W"):
        RankerModel(np.zeros((3, 3), np.float32))


# ---------------------------------------------------------------- Critic budget (real LLM)
@pytest.fixture(scope="module")
def llm():
    from metacog_fast.llm import open_llm

    m = open_llm(n_threads=1)
    yield m
    m.close()


def test_critic_budget_is_three_calls(llm) -> None:
    from metacog_fast.scienceworld.sage import Critic

    c = Critic(llm, budget=3, plan_tokens=4)
    hist = [("look around", "The kitchen.")] * 3
    for _ in range(3):
        d = c.correct("boil water", hist, ["repeated_observation"], ["activate stove", "go to hallway"])
        assert d.actions and d.actions[0] in ("activate stove", "go to hallway")
    assert c.exhausted
    with pytest.raises(RuntimeError, match="budget"):
        c.correct("boil water", hist, ["repeated_observation"], ["activate stove"])
    c.reset()
    with pytest.raises(ValueError, match="stagnation"):
        c.correct("boil water", hist, [], ["activate stove"])
    assert c.calls == 0


# ---------------------------------------------------------------- configs, run options, report input
def test_configs_and_validation() -> None:
    assert [(c.use_amm, c.use_srm) for c in CONFIGS.values()] == [(False, False), (True, False), (False, True), (True, True)]
    assert CONFIGS["full"].critic_budget == 3
    with pytest.raises(ValueError, match="config"):
        config_for("everything")
    with pytest.raises(ValueError, match="swift"):
        config_for("baseline", swift="gpt")
    with pytest.raises(ValueError, match="max_steps"):
        config_for("srm", max_steps=0)
    assert parse_tasks("0-2,7") == [0, 1, 2, 7]
    with pytest.raises(ValueError, match="budget_factor"):
        config_for("full", budget_factor=-1.0)


def test_budget_follows_the_gold_path_with_a_floor() -> None:
    from metacog_fast.scienceworld.runner import SIMULATOR_STEP_LIMIT

    c = config_for("baseline")  # the protocol's defaults: max(50, 1.5 x gold)
    assert (c.max_steps, c.budget_factor) == (50, 1.5)
    assert [c.budget(g) for g in (0, 10, 33, 34, 81)] == [50, 50, 50, 51, 122]
    assert config_for("baseline", budget_factor=0.0).budget(81) == 50
    assert config_for("baseline", max_steps=7, budget_factor=2.0).budget(3) == 7
    # the simulator's own limit counts ticks (a `wait` is ~10): it must sit far above any budget
    assert SIMULATOR_STEP_LIMIT >= 20 * c.budget(130)
    with pytest.raises(ValueError, match="tasks"):
        parse_tasks("28-31")
    with pytest.raises(ValueError, match="configs"):
        RunConfig(configs=["turbo"]).validate()
    assert [group_of(x) for x in (5, 20, 21, 50, 51, 130)] == ["Short", "Short", "Medium", "Medium", "Long", "Long"]


def test_report_rejects_malformed_episodes(tmp_path) -> None:
    (tmp_path / "episodes" / "srm").mkdir(parents=True)
    (tmp_path / "episodes" / "srm" / "a__1.json").write_text("{not json")
    with pytest.raises(ValueError, match="malformed JSON"):
        load_episodes(str(tmp_path))
    write_json(str(tmp_path / "episodes" / "srm" / "a__1.json"), {"config": "srm"})
    with pytest.raises(ValueError, match="lacks"):
        load_episodes(str(tmp_path))
    assert json.loads((tmp_path / "episodes" / "srm" / "a__1.json").read_text()) == {"config": "srm"}


def test_report_pairs_episodes_across_configurations() -> None:
    from metacog_fast.scienceworld.report import paired, summarise

    def ep(c: str, task: str, v: int, score: float, won: bool, steps: int, swift: int) -> dict:
        mech = {k: 0 for k in ("memory_writes", "t1", "t4", "gate1_drops", "gate1_repairs", "critic_calls",
                               "system2_calls", "sage_calls", "invalid_steps")}
        mech.update(swift_steps=swift, buffer_steps=steps - swift)
        return {"config": c, "task": task, "variation": v, "score": score, "won": won, "steps": steps,
                "gold_len": 30 if task == "a" else 10, "mechanisms": mech, "llm_calls": 1, "llm_tokens": 10,
                "llm_seconds": 1.0, "env_seconds": 1.0, "agent_seconds": 0.001 * steps}

    eps = {"baseline": [ep("baseline", "a", 1, 100, True, 10, 5), ep("baseline", "a", 2, 50, False, 20, 10),
                        ep("baseline", "b", 1, 0, False, 20, 20)],
           "srm": [ep("srm", "a", 1, 100, True, 6, 6), ep("srm", "a", 2, 100, True, 8, 0)]}
    kept, dropped = paired(eps)
    assert dropped == 1 and len(kept["baseline"]) == 2
    s = summarise(kept["baseline"])
    assert s["score"] == 75.0 and s["success_pct"] == 50.0 and s["steps_at_succ"] == 10.0
    assert {k: s["groups"]["Medium"][k] for k in ("tasks", "score")} == {"tasks": 1, "score": 75.0}
    assert s["groups"]["Medium"]["score_interval"] == {"mean": 75.0, "low": 75.0, "high": 75.0, "n": 1}
    assert abs(s["mechanisms"]["swift_executed_pct"] - 50.0) < 1e-9
    t = summarise(kept["srm"])
    assert t["score"] == 100.0 and t["success_pct"] == 100.0 and t["steps_at_succ"] == 7.0
