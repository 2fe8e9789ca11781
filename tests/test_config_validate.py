"""The configs that library callers build directly (not through the CLI) refuse bad values at once,
naming the field, before any model, environment or run folder opens."""
from __future__ import annotations

import pytest

from metacog_fast.experience.protocols import ProtocolConfig, continuous_learning, transfer
from metacog_fast.town.runner import RunOptions, ablate, run_once


@pytest.mark.parametrize("field,value", [("agents", -1), ("agents", 0), ("steps", 0), ("max_llm_calls", 0),
                                         ("step_budget", 0.0), ("step_budget", -1.0), ("agents", True)])
def test_town_run_options_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field}: expected"):
        RunOptions(**{field: value}).validate()


def test_town_entry_points_validate_before_opening_anything(tmp_path):
    # llm and encoder None: had validation not come first, these would fail on the scenario or the LLM
    with pytest.raises(ValueError, match="^agents: expected"):
        run_once(RunOptions(agents=-1), None, str(tmp_path / "a"), None, None)
    with pytest.raises(ValueError, match="^steps: expected"):
        ablate(RunOptions(steps=0), str(tmp_path / "b"), None, None)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_town_defaults_are_valid():
    assert RunOptions().validate() == RunOptions()


@pytest.mark.parametrize("kwargs,field", [({"env": "nethack"}, "env"), ({"iterations": 0}, "iterations"),
                                          ({"n_threads": 0}, "n_threads"), ({"games": []}, "games"),
                                          ({"games": ["x"]}, "games"), ({"embedder": "bert"}, "embedder"),
                                          ({"env": "scienceworld", "games": ["boil"]}, "games")])
def test_experience_protocol_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        ProtocolConfig(**kwargs).validate()


def test_experience_entry_points_validate_before_any_work(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="^iterations: "):
        continuous_learning(ProtocolConfig(iterations=0, out=str(out)))
    with pytest.raises(ValueError, match="^memory_in: "):
        transfer(ProtocolConfig(out=str(out)))
    assert not out.exists()
    assert ProtocolConfig(env="scienceworld", games=["boil:0"]).validate().games == ["boil:0"]
