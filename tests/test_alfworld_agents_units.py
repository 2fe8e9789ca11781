"""ALFWorld agents: few-shot derivation, parsing, mapping, FCRF difficulty and lesson pool,
reflection memory limits, config validation. Real encoder and memory store; no LLM here."""
from __future__ import annotations

import json

import pytest

from metacog_fast.alfworld.actions import ActionMapper, clean_action, is_think, parse_rollout
from metacog_fast.alfworld.config import AgentConfig, RunConfig
from metacog_fast.alfworld.fcrf import INITIAL_LESSONS, LessonPool, deep_reflection, difficulty
from metacog_fast.alfworld.fewshot import (TASK_TYPES, format_plan, load_examples, plan_from_walkthrough,
                                                  think_before)
from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT, chunk_examples, select_games


@pytest.fixture(scope="module")
def encoder():
    from metacog_fast.scoring import MiniLMEncoder

    return MiniLMEncoder()


def test_plan_and_thinks_from_walkthrough():
    walk = ["go to sinkbasin 1", "take apple 1 from sinkbasin 1", "go to microwave 1",
            "heat apple 1 with microwave 1", "go to countertop 2", "move apple 1 to countertop 2"]
    steps = plan_from_walkthrough(walk)
    assert steps == ["find and take a apple", "heat the apple with the microwave", "put the apple in/on the countertop"]
    assert format_plan(steps).startswith("1. find and take a apple. 2. heat")
    assert think_before("go to sinkbasin 1") is None
    assert "take it" in think_before("take apple 1 from sinkbasin 1")
    assert "heat the apple with the microwave" in think_before("heat apple 1 with microwave 1")
    assert "desklamp" in think_before("use desklamp 1")
    assert plan_from_walkthrough(["take soap bar 2 from cabinet 1"]) == ["find and take a soap bar"]


def test_committed_fewshot_examples_are_solved_train_walkthroughs():
    ex = load_examples(DEFAULT_FEWSHOT)
    assert set(ex) == set(TASK_TYPES)
    for t, items in ex.items():
        assert len(items) == 2
        assert items[0]["gamefile"] != items[1]["gamefile"]
        for e in items:
            assert e["task_type"] == t and e["gamefile"].endswith("game.tw-pddl")
            assert "Your task is to:" in e["intro"]
            assert e["steps"][0][0].startswith("think:")
            acts = [a for a, _ in e["steps"] if not a.startswith("think:")]
            assert len(acts) <= 12 and acts[-1].split()[0] in ("move", "use", "take")


def test_fewshot_cache_errors(tmp_path):
    bad = tmp_path / "f.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="malformed few-shot JSON"):
        load_examples(bad)
    bad.write_text(json.dumps({"per_type": 2, "max_steps": 12, "examples": {"x": []}}))
    with pytest.raises(ValueError, match="task types"):
        load_examples(bad)


def test_action_parsing():
    assert clean_action(" > go to desk 1.\nYou arrive") == "go to desk 1"
    assert is_think("think: I need a mug") and not is_think("go to desk 1")
    text = " go to desk 1\nYou arrive at desk 1.\n> take mug 1 from desk 1\nYou pick up the mug 1.\n> go to sinkbasin 1\nYou"
    assert parse_rollout(text, 2) == [("go to desk 1", "You arrive at desk 1."),
                                      ("take mug 1 from desk 1", "You pick up the mug 1.")]
    assert parse_rollout(text, 5)[-1] == ("go to sinkbasin 1", "You")
    assert parse_rollout("look\n### Example", 3) == [("look", "")]
    assert parse_rollout("", 3) == []


def test_mapping_modes(encoder):
    adm = ["go to desk 1", "go to drawer 1", "take mug 1 from desk 1", "look"]
    m = ActionMapper("embed", encoder=encoder)
    assert m.map("Go to desk 1.", adm).how == "exact"
    got = m.map("pick up the mug from the desk", adm)
    assert got.how == "embed" and got.action == "take mug 1 from desk 1"
    raw = ActionMapper("none").map("fly away", adm)
    assert raw.action == "fly away" and raw.how == "raw"
    with pytest.raises(ValueError, match="mode"):
        ActionMapper("nearest")
    with pytest.raises(ValueError, match="encoder"):
        ActionMapper("embed")
    with pytest.raises(ValueError, match="llm"):
        ActionMapper("choose")


def test_fcrf_difficulty_and_intensity():
    d = {t: difficulty(t) for t in TASK_TYPES}
    assert d["pick_and_place_simple"] == 1 and d["look_at_obj_in_light"] == 2
    assert d["pick_heat_then_place_in_recep"] == d["pick_cool_then_place_in_recep"] == 3
    assert d["pick_two_obj_and_place"] == 4
    assert all(1 <= v <= 5 for v in d.values())
    assert not deep_reflection("pick_and_place_simple") and deep_reflection("pick_two_obj_and_place")
    with pytest.raises(ValueError, match="task_type"):
        difficulty("make_coffee")


def test_lesson_pool_grows_without_duplicates():
    pool = LessonPool()
    t = "pick_heat_then_place_in_recep"
    n = len(pool.lessons(t))
    assert n == len(INITIAL_LESSONS[t])
    assert pool.add(t, "Open the microwave before heating.")
    assert not pool.add(t, "  open the microwave   before heating ")
    assert not pool.add(t, "   ")
    assert pool.lessons(t)[-1] == "Open the microwave before heating."
    assert len(pool.lessons(t)) == n + 1
    assert LessonPool().lessons(t) == INITIAL_LESSONS[t]  # pools are not shared between instances


def test_reflection_memory_keeps_last_n(tmp_path, encoder):
    from metacog_fast.alfworld.memory import ReflectionMemory

    mem = ReflectionMemory(tmp_path / "m.db", encoder)
    for e in range(5):
        mem.add("g1", e, f"reflection number {e}")
    mem.add("g2", 0, "other game")
    assert mem.last("g1", 3) == ["reflection number 2", "reflection number 3", "reflection number 4"]
    assert mem.last("g2", 3) == ["other game"]
    assert mem.last("g1", 0) == []
    with pytest.raises(ValueError, match="text"):
        mem.add("g1", 6, "  ")
    assert mem.clear("g1") == 5 and mem.last("g1", 3) == []
    mem.close()


def test_config_validation():
    with pytest.raises(ValueError, match="map_actions"):
        AgentConfig(map_actions="fuzzy").validate()
    with pytest.raises(ValueError, match="rollouts"):
        AgentConfig(rollouts=0).validate()
    with pytest.raises(ValueError, match="agent"):
        RunConfig(agent="dqn").validate()
    with pytest.raises(ValueError, match="scorer"):
        RunConfig(agent="muse").validate()
    with pytest.raises(ValueError, match="unknown fields"):
        RunConfig.from_dict({"agent": "react", "colour": 1})
    c = RunConfig(agent="fcrf", agent_config=AgentConfig(max_steps=7))
    assert RunConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match="n_ctx"):
        RunConfig(agent="react", n_ctx=100).validate()


def test_run_cli_arguments_reach_the_config():
    import argparse

    from metacog_fast.alfworld.cli import add_run_arguments, run_config

    p = argparse.ArgumentParser()
    add_run_arguments(p)
    cfg = run_config(p.parse_args(["--agent", "react", "--out", "x", "--max-steps", "50", "--n-ctx", "8192"]))
    assert cfg.n_ctx == 8192 and cfg.agent_config.max_steps == 50
    assert run_config(p.parse_args(["--agent", "react", "--out", "x"])).n_ctx == RunConfig.n_ctx


def test_game_selection_round_robin():
    games = select_games("valid_train", 12)
    types = [g["task_type"] for g in games]
    assert types[:6] == list(TASK_TYPES) and types[6:] == list(TASK_TYPES)
    assert len({g["game"] for g in games}) == 12
    with pytest.raises(ValueError, match="tasks"):
        select_games("valid_train", 10_000)


def test_chunk_examples_labels():
    recs = [{"task": "t", "plan": "p", "won": True, "pairs": [[f"a{i}", f"o{i}"] for i in range(6)]},
            {"task": "t", "plan": "p", "won": False, "pairs": [["a", "o"]]},
            {"task": "t", "plan": "p", "won": False, "pairs": []}]
    ex = chunk_examples(recs)
    assert [len(e["chunk"]) for e in ex] == [4, 2, 1]
    assert [e["label"] for e in ex] == [1.0, 1.0, 0.0]


def test_report_keeps_two_runs_of_one_agent():
    from metacog_fast.alfworld.report import render_tables, run_label

    taken: dict = {}
    for adapt in (0, 2):
        taken[run_label({"agent": "muse", "adapt_episodes": adapt}, taken)] = {
            "adapt_episodes": adapt, "success_rate": 0.1 * (1 + adapt), "episodes": 12}
    taken[run_label({"agent": "react", "adapt_episodes": 0}, taken)] = {"adapt_episodes": 0, "success_rate": 0.2,
                                                                          "episodes": 12}
    assert sorted(taken) == ["muse", "muse+adapt2", "react"]
    md = render_tables(taken)
    assert "| muse | 10% | — | 12 |" in md and "| muse+adapt2 | — | 30% | 12 |" in md
    assert md.index("| react |") < md.index("| muse |") < md.index("| muse+adapt2 |")
