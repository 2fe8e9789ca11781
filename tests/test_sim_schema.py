"""World/scenario files: schema errors name file, field and expectation; seeded random fill."""
from __future__ import annotations

import copy
import json

import pytest

from metacog_fast.town import SchemaError, load_scenario, load_world
from metacog_fast.town.loader import resolve


def _world_doc() -> dict:
    with open(resolve("worlds", "town")) as f:
        return json.load(f)


def _scenario_doc(name: str = "zombie") -> dict:
    with open(resolve("scenarios", name)) as f:
        return json.load(f)


@pytest.mark.parametrize("name", ["zombie", "party", "mystery"])
def test_builtin_scenarios_load(name):
    sc = load_scenario(name)
    assert sc.name == name and len(sc.agents) >= 3
    names = [a.name for a in sc.agents]
    assert len(set(names)) == len(names)
    for a in sc.agents:
        assert sc.world.walkable[a.position[1], a.position[0]]
        assert sc.world.location_at(*a.position) == a.location


def test_zombie_agents_start_without_goal():
    sc = load_scenario("zombie", n_agents=6)
    assert all(a.goal == "" for a in sc.agents)


def test_mystery_and_party_roles():
    m = load_scenario("mystery")
    roles = {a.name: a.role for a in m.agents}
    assert roles[m.rules["murderer"]] == "murderer" and roles[m.rules["detective"]] == "detective"
    p = load_scenario("party")
    assert {a.name: a.role for a in p.agents}[p.rules["host"]] == "host"


def test_world_type_error_names_file_and_field(tmp_path):
    doc = _world_doc()
    doc["locations"][2]["bounds"] = [1, 2, "x", 4]
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError) as e:
        load_world(str(path))
    msg = str(e.value)
    assert str(path) in msg and "locations[2].bounds[2]" in msg and "expected integer" in msg


def test_world_bounds_outside_map(tmp_path):
    doc = _world_doc()
    doc["locations"][0]["bounds"] = [0, 0, 99, 3]
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match=r"locations\[0\]\.bounds: expected \[x0, y0, x1, y1\]"):
        load_world(str(path))


def test_world_map_row_length(tmp_path):
    doc = _world_doc()
    doc["map"][3] = doc["map"][3][:-1]
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match=r"map\[3\]: expected a row of 36 characters"):
        load_world(str(path))


def test_scenario_unknown_field_and_missing(tmp_path):
    doc = _scenario_doc()
    doc["agents"][1]["mood"] = "sad"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match=r"s\.json: field agents\[1\]: unknown field\(s\) \['mood'\]"):
        load_scenario(str(path))
    doc = _scenario_doc()
    del doc["interview_questions"][0]["question"]
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match=r"interview_questions\[0\]: missing required field\(s\) \['question'\]"):
        load_scenario(str(path))


def test_scenario_rule_and_location_errors(tmp_path):
    doc = _scenario_doc()
    doc["rules"]["zombies"] = -1
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match=r"rules\.zombies: expected a number with minimum 0, got -1"):
        load_scenario(str(path))
    doc = _scenario_doc()
    doc["agents"][0]["location"] = "Moon"
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match=r"agents\[0\]\.location: expected a location of world 'town'"):
        load_scenario(str(path))
    doc = _scenario_doc("mystery")
    doc["rules"]["detective"] = doc["rules"]["murderer"]
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match=r"rules\.detective: expected a different agent"):
        load_scenario(str(path))


def test_malformed_json_and_missing_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x", "steps": 3,,}')
    with pytest.raises(SchemaError, match=r"bad\.json: field <line 1 column 26>: malformed JSON"):
        load_scenario(str(path))
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_scenario(str(tmp_path / "nope.json"))
    with pytest.raises(FileNotFoundError, match="no such built-in"):
        load_scenario("wedding")


def test_random_fill_is_seeded():
    doc = {"name": "blank", "num_agents": 6}  # every attribute left out
    a = load_scenario(copy.deepcopy(doc), seed=7)
    b = load_scenario(copy.deepcopy(doc), seed=7)
    c = load_scenario(copy.deepcopy(doc), seed=8)
    assert [vars(x) for x in a.agents] == [vars(x) for x in b.agents]
    assert [vars(x) for x in a.agents] != [vars(x) for x in c.agents]
    assert len(a.agents) == 6 and all(x.name and x.description and x.personality and x.goal for x in a.agents)
    assert len({x.position for x in a.agents}) == 6  # distinct start cells


def test_fill_keeps_given_fields_and_adds_agents():
    sc = load_scenario("zombie", n_agents=8, seed=3)
    assert [a.name for a in sc.agents[:3]] == ["Ada", "Ben", "Cleo"]
    assert sc.agents[0].location == "Cafe" and sc.agents[0].personality == "calm, caring"
    assert len(sc.agents) == 8 and len({a.name for a in sc.agents}) == 8
    assert load_scenario("zombie", n_agents=2).agents[1].name == "Ben"


@pytest.mark.parametrize("name", ["zombie", "party", "mystery"])
def test_ablation_seed_loads_the_scenario_with_its_own_agents(name):
    """An ablation without --seed counts from the scenario's seed; the mystery's rules name its
    detective and culprit, so loading it with one agent (what the ablation once did) failed."""
    from metacog_fast.town.runner import RunOptions, scenario_seed

    assert scenario_seed(RunOptions(scenario=name)) == load_scenario(name).seed
    assert scenario_seed(RunOptions(scenario=name, seed=7)) == 7
