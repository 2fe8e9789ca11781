"""ScienceWorld fixes without training (issue 50, item 1): executable forms of gold steps in the
training data and in grounding, the loop and focus guards, Sage triggered by the situation, and
the ``easy`` simplification as a run setting. The episode tests play the real simulator."""
from __future__ import annotations

import numpy as np
import pytest

from metacog_fast.scienceworld.agent import DualProcessAgent, swift_margin
from metacog_fast.scienceworld.config import config_for
from metacog_fast.scienceworld.grounding import (ValidSet, candidate_actions, executable_form, ground,
                                                 is_ambiguity_question)
from metacog_fast.scienceworld.guards import FocusGuard, focus_head, loop_guard_mask, loop_mask, periodic_loop
from metacog_fast.scienceworld.runner import RunConfig
from metacog_fast.scienceworld.swift import HC, HT, NF, RankerModel, RankerSwift, SwiftState

# Task descriptions of ScienceWorld train variations (boil 0, use-thermometer, find-plant).
BOIL = ("Your task is to boil water. For compounds without a boiling point, combining the substance with salt "
        "may be required. First, focus on the substance. Then, take actions that will cause it to change its "
        "state of matter.")
THERMO = ("Your task is to measure the temperature of unknown substance B, which is located around the kitchen. "
          "First, focus on the thermometer. Next, focus on the unknown substance B. If the unknown substance B "
          "temperature is above 50.0 degrees, focus on the green box. If the unknown substance B temperature is "
          "below 50.0 degrees, focus on the blue box. The boxes are located around the kitchen.")
PLANT = "Your task is to find a(n) plant. First, focus on the thing. Then, move it to the red box in the kitchen."


# ---------------------------------------------------------------- executable forms
@pytest.mark.parametrize("gold,valid,expected,rule", [
    # gold paths of train variations (use-thermometer, boil, find-plant) against their state's valid list
    ("open door to bathroom", ["open bathroom door", "open door to outside"], "open bathroom door",
     "door to room->room door"),
    ("use thermometer in inventory on substance in metal pot", ["use thermometer on substance in metal pot"],
     "use thermometer on substance in metal pot", "strip in inventory"),
    ("focus on thermometer in inventory", ["focus on thermometer", "focus on inventory"], "focus on thermometer",
     "strip in <room>"),
    ("pick up unknown substance B", ["pick up unknown substance", "pick up cup"], "pick up unknown substance",
     "substance letter"),
    ("move flower pot 8 containing cherry tree and soil in inventory to red box",
     ["move flower pot 8 to red box", "move flower pot 3 to red box"], "move flower pot 8 to red box",
     "strip containing"),
    ("examine substance in metal pot", ["look at substance in metal pot"], "look at substance in metal pot",
     "examine->look at"),
    ("focus on apple tree in the seedling stage in self watering flower pot 6",
     ["focus on apple tree in self watering flower pot 6", "focus on apple tree in self watering flower pot 9"],
     "focus on apple tree in self watering flower pot 6", "strip life stage"),
    ("look around", ["open door"], "look around", ""),
])
def test_gold_steps_map_to_the_valid_list(gold: str, valid: list[str], expected: str, rule: str) -> None:
    form, got = executable_form(gold, valid)
    assert form == expected and form in valid + ["look around"]
    assert got == rule


def test_no_fuzzy_mapping_and_unmapped_steps() -> None:
    # one digit apart is another object: never a repair of a gold step
    assert executable_form("pick up flower pot 8", ["pick up flower pot 3"]) == (None, "unmapped")
    # the simulator accepted the step as written: the gold text is its own executable form
    assert executable_form("open door to hallway", ["open door to outside"], accepted=True) == (
        "open door to hallway", "as given")
    q = "Ambiguous request: Please enter the number for the action you intended (or blank to cancel):\n0: a\n1: b"
    assert is_ambiguity_question(q) and executable_form("1", [], observation=q) == ("1", "answer")
    assert candidate_actions(["look around"], q) == ["look around", "0", "1"]
    assert candidate_actions(["look around"], "You see a cup.") == ["look around"]


def test_grounding_while_playing_uses_the_same_rules() -> None:
    vs = ValidSet(["open bathroom door", "use thermometer on substance in metal pot"], room="kitchen")
    assert ground("open door to bathroom", vs).action == "open bathroom door"
    assert ground("use thermometer in inventory on substance in metal pot", vs).action == (
        "use thermometer on substance in metal pot")


# ---------------------------------------------------------------- guards
def test_periodic_loop_detection() -> None:
    a, b, c, d = "activate sink", "look around", "deactivate sink", "look around"
    assert periodic_loop(["x", a, b, c, d, a, b, c, d]) == 4
    assert loop_mask(["x", a, b, c, d, a, b, c, d]) == {a, b, c}
    assert periodic_loop(["w", "w"]) == 1  # the same step twice in a row
    assert periodic_loop(["w"]) == 0
    assert periodic_loop(["w", "w", "w"], min_length=4) == 0  # a period-1 repeat counts from 4 actions
    assert periodic_loop(["x", a, b, c, d, a, b, c]) == 0
    assert periodic_loop([a, b, a, b], repeats=3) == 0
    assert periodic_loop([]) == 0
    # waiting repeats with the same text while a plant grows: masked only after 10 in a row
    assert loop_guard_mask(["wait1"] * 9, ["wait1"] * 9) == (1, set())
    assert loop_guard_mask(["wait1"] * 10, ["wait1"] * 10) == (1, {"wait1"})
    assert loop_guard_mask([b, "wait1", b, "wait1"], [b, "wait1", b, "wait1"]) == (2, {b, "wait1"})
    # on (action, observation) pairs: boil's gold alternation while the temperature rises is no loop
    ex, th = "examine substance in metal pot", "use thermometer on substance in metal pot"
    rising = [(ex, "water"), (th, "10 degrees"), (ex, "water"), (th, "20 degrees"), (ex, "water"), (th, "30 degrees")]
    assert periodic_loop([a for a, _ in rising]) == 2 and periodic_loop(rising) == 0


def test_focus_guard_allows_only_the_tasks_target() -> None:
    g = FocusGuard(BOIL)
    assert g.allowed("focus on substance in metal pot")  # boil's gold focus
    assert g.allowed("focus on water")
    assert not g.allowed("focus on metal pot") and not g.allowed("focus on sink")
    assert g.allowed("look around") and g.allowed("open door to kitchen")
    g = FocusGuard(THERMO)
    assert g.allowed("focus on thermometer") and g.allowed("focus on unknown substance")
    assert g.allowed("focus on green box") and g.allowed("focus on blue box")
    assert not g.allowed("focus on orange") and not g.allowed("focus on inventory")
    g.executed("focus on thermometer")
    assert not g.allowed("focus on thermometer")  # never twice
    assert FocusGuard(PLANT).allowed("focus on adult cherry tree")  # a category: the guard cannot judge
    assert focus_head("focus on substance in metal pot") == {"substance"}


# ---------------------------------------------------------------- Sage triggers
def _ranker(v: np.ndarray | None = None) -> RankerSwift:
    return RankerSwift(RankerModel(np.zeros((HC, 2 * HT)), np.zeros(HC), np.zeros(NF) if v is None else v))


def test_sage_is_triggered_by_the_situation() -> None:
    cfg = config_for("baseline", low_margin=0.5, stagnation_steps=6)
    agent = DualProcessAgent(cfg, _ranker(), llm=None)
    st = SwiftState("task", "obs", "", ["look around", "open door"], {})
    # a zero ranker is unsure (margin 0 < 0.5)
    assert swift_margin(agent.swift, st) == 0.0
    assert agent._sage_reasons(3, False, 2, 0, 0, st) == ["low_margin"]
    sure = DualProcessAgent(cfg, _ranker(np.array([0, 0, 0, 0, 0, 0, 0, 5.0], np.float32)), llm=None)
    st2 = SwiftState("task", "obs", "", ["look around", "open the door to the kitchen now"], {})
    assert swift_margin(sure.swift, st2) > 0.5
    assert sure._sage_reasons(3, False, 2, 0, 0, st2) == []  # not stuck, no loop, sure: no Sage
    assert sure._sage_reasons(0, False, 0, -10**9, 0, st2) == ["start"]
    assert sure._sage_reasons(9, False, 6, 0, 0, st2) == ["stagnation"]
    assert sure._sage_reasons(9, True, 1, 0, 4, st2) == ["invalid", "loop"]
    assert sure._sage_reasons(9, False, 1, 8, 4, st2) == []  # Sage just acted: its buffer runs first
    fixed = DualProcessAgent(config_for("baseline", sage_trigger="fixed"), _ranker(), llm=None)
    assert fixed._sage_reasons(3, False, 4, 0, 0, st) == ["no_progress"]
    assert fixed._sage_reasons(10, False, 0, 0, 0, st) == ["plan_every"]


@pytest.mark.parametrize("field,value", [("sage_trigger", "always"), ("low_margin", -1.0), ("loop_repeats", 1),
                                         ("stagnation_steps", 0)])
def test_trigger_options_are_checked(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        config_for("baseline", **{field: value})


def test_easy_is_a_run_setting() -> None:
    assert RunConfig(tasks=[13], simplifications="easy").validate().simplifications == "easy"
    with pytest.raises(ValueError, match="simplifications"):
        RunConfig(tasks=[13], simplifications="hard").validate()
    with pytest.raises(ValueError, match="eval_split"):
        RunConfig(tasks=[13], eval_split="train").validate()
    with pytest.raises(ValueError, match="sage_trigger"):
        RunConfig(tasks=[13], sage_trigger="sometimes").validate()


# ---------------------------------------------------------------- the real simulator
def _sw_env(**kw):
    pytest.importorskip("scienceworld")
    from metacog_fast.scienceworld import env as swe

    if swe.java_version() is None:
        pytest.skip("Java is not installed: " + swe.JAVA_HINT)
    from metacog_fast.envs import make_env

    return make_env("scienceworld", step_limit=100_000, **kw)


@pytest.fixture(scope="module")
def thermo_env():
    env = _sw_env(task=4, split="train")  # use-thermometer: 9 of the first train gold path's 22 steps are not listed
    yield env
    env.close()


def test_gold_steps_not_in_the_valid_list_are_kept_for_training(thermo_env) -> None:
    """The first train variation of use-thermometer: gold ``open door to hallway``, ``focus on
    thermometer in inventory`` ... are not in the valid list; their executable forms keep them."""
    from metacog_fast.scienceworld.finetune_data import examples_of, play_gold
    from metacog_fast.scienceworld.runner import walk_gold

    v = thermo_env.variations[0]
    rec = play_gold(thermo_env, v, 4)
    steps = rec["steps"]
    assert rec["won"] and 0 < len(steps) <= len(rec["gold_path"])  # the episode ends when won
    listed = sum(s["admissible"] for s in steps)
    assert listed < len(steps)  # the fact that used to drop steps
    exs = examples_of(rec)
    mapped = [s for s in steps if s["executable"] is not None]
    assert len(exs) == len(mapped) > listed
    assert {s["rule"] for s in steps if not s["admissible"] and s["executable"]} & {
        "strip in <room>", "strip in inventory", "substance letter", "door to room->room door", "as given"}
    for e in exs:
        assert e["completion"] == " " + e["executable"]
    stats: dict[str, int] = {}
    gold = walk_gold(thermo_env, v, stats)
    assert len(gold) == len(mapped) and sum(stats.values()) == len(steps)
    for ex in gold:  # every kept state offers its gold action among the candidates
        assert ex.gold in ex.valid


def _repeat_last_ranker() -> RankerSwift:
    v = np.zeros(NF, np.float32)
    v[4] = 20.0  # "repeats the last action": a Swift that loops on its first action forever
    return _ranker(v)


@pytest.mark.parametrize("guard", [False, True])
def test_loop_guard_breaks_a_periodic_loop(thermo_env, guard: bool) -> None:
    cfg = config_for("baseline", use_sage=False, loop_guard=guard, loop_same_observations=False, max_steps=10,
                     budget_factor=0.0)
    res = DualProcessAgent(cfg, _repeat_last_ranker(), llm=None).run(thermo_env, thermo_env.variations[1], "b")
    assert res.steps == 10 and res.mechanisms["sage_calls"] == 0 and res.sage_reasons == [""] * 10
    if guard:
        assert res.mechanisms["loop_steps"] >= 1
        # the guard never lets a block repeat a third time
        assert all(periodic_loop(res.actions[:t], repeats=3, min_length=6) == 0 for t in range(1, 11))
    else:
        assert periodic_loop(res.actions, min_length=4) > 0 and res.mechanisms["loop_steps"] == 0


def test_focus_guard_in_an_episode(thermo_env) -> None:
    """A Swift that always focuses: without the guard the first focus is on a wrong object and the
    episode ends at -100; with it only the task's targets (as the guard reads them) are focused on."""
    v = np.zeros(NF, np.float32)
    v[5] = 20.0  # the focus flag
    v[2] = -30.0  # times executed: another focus each time
    cfg = config_for("baseline", use_sage=False, max_steps=6, budget_factor=0.0)
    res = DualProcessAgent(replace_cfg(cfg, focus_guard=False), _ranker(v), llm=None).run(
        thermo_env, thermo_env.variations[1], "b")
    assert res.actions[0].startswith("focus on") and res.raw_score < 0 and res.steps < 6
    res = DualProcessAgent(cfg, _ranker(v), llm=None).run(thermo_env, thermo_env.variations[1], "b")
    g = FocusGuard(thermo_env.reset(variation=thermo_env.variations[1])[1]["task"])
    focused = [a for a in res.actions if a.startswith("focus on")]
    assert all(g.allowed(a) for a in focused)  # only the task's targets (none may be in reach)
    assert res.raw_score >= 0 and res.steps == 6


def replace_cfg(cfg, **kw):
    from dataclasses import replace

    return replace(cfg, **kw).validate()


def test_easy_simplification_reaches_the_episode() -> None:
    env = _sw_env(task=13, split="dev", simplifications="easy", gold_path=False)
    try:
        obs, info = env.reset(variation=env.variations[0])
        assert any(a.startswith("teleport to ") for a in info["admissible"])
        cfg = config_for("baseline", use_sage=False, max_steps=2, budget_factor=0.0)
        res = DualProcessAgent(cfg, _ranker(), llm=None).run(env, env.variations[0], "b")
        assert res.simplifications == "easy" and res.steps == 2
    finally:
        env.close()


def test_fixes_report_pairs_episodes(tmp_path) -> None:
    import json

    from metacog_fast.scienceworld.fixes_report import compare, ends_in_loop, left_start_room

    loop = ["open drawer"] + ["activate sink", "look around", "deactivate sink", "look around"] * 3
    assert ends_in_loop(loop) and not ends_in_loop(loop[:-1] + ["go to hallway"])
    assert left_start_room({"rooms": ["kitchen", "hallway"]}) and not left_start_room({"rooms": ["kitchen"]})
    for run, score, rooms, acts in (("a", 0.0, ["kitchen"], loop), ("b", 10.0, ["kitchen", "hallway"], loop[:5])):
        d = tmp_path / run / "episodes" / "baseline"
        d.mkdir(parents=True)
        for k in range(3):
            (d / f"boil__{k}.json").write_text(json.dumps({"score": score + k, "raw_score": score + k, "won": False,
                                                           "rooms": rooms, "actions": acts}))
    res = compare(str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "out"))
    assert res["after_minus_before"]["diff"] == 10.0 and res["after_minus_before"]["n"] == 3
    assert res["before"]["ends_in_loop"]["successes"] == 3 and res["after"]["left_start_room"]["successes"] == 3
    assert "| before | 3 |" in (tmp_path / "out.md").read_text()
    with pytest.raises(ValueError, match="run"):
        compare(str(tmp_path / "a"), str(tmp_path / "missing"), str(tmp_path / "x"))
