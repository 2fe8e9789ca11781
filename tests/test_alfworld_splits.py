"""The room-disjoint validation split (metacog_fast.alfworld.splits): names parsed, scenes drawn per
room kind with every task type held out in proportion, the committed file equal to what the code
computes from the games, and bad input named."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from metacog_fast.alfworld.splits import (DEFAULT_FILE, TASK_TYPES, heldout_scenes, in_heldout_rooms, room_kind,
                                          scene_of, select_heldout_scenes, split_summary, task_type_of,
                                          write_heldout_file)

TRAIN = Path(__file__).resolve().parents[1] / "data" / "alfworld" / "json_2.1.1" / "train"


def test_names_parse():
    g = "pick_and_place_simple-Apple-None-Fridge-6"
    assert scene_of(g) == 6 and task_type_of(g) == "pick_and_place_simple"
    p = f"/x/json_2.1.1/train/{g}/trial_T20190907_174127_043461/game.tw-pddl"
    assert scene_of(p) == 6 and task_type_of(p) == "pick_and_place_simple"
    assert [room_kind(s) for s in (6, 214, 301, 430)] == ["kitchen", "livingroom", "bedroom", "bathroom"]
    for bad in ("trial_T2019", "pick_and_place_simple", "nothing-here-7"):
        with pytest.raises(ValueError, match="game"):
            scene_of(bad)
    with pytest.raises(ValueError, match="scene"):
        room_kind(150)


def _synthetic() -> list[str]:
    games = []
    for kind in (0, 200, 300, 400):
        for s in range(1, 31):
            for t in TASK_TYPES:
                if t == "look_at_obj_in_light" and kind == 0:
                    continue  # as in ALFWorld: no lamp tasks in kitchens
                games.append(f"{t}-Obj-None-Recep-{kind + s}")
    return games


def test_selection_is_deterministic_proportional_and_balanced():
    games = _synthetic()
    a = select_heldout_scenes(games, 12, seed=1, draws=200)
    assert a == select_heldout_scenes(games, 12, seed=1, draws=200)
    assert a != select_heldout_scenes(games, 12, seed=2, draws=200)
    assert len(a) == 12 and all(sum(room_kind(s) == k for s in a) == 3
                                for k in ("kitchen", "livingroom", "bedroom", "bathroom"))
    summary = split_summary(games, a)
    assert all(v["heldout"] > 0 for v in summary.values())
    assert sum(v["heldout"] + v["rest"] for v in summary.values()) == len(games)
    with pytest.raises(ValueError, match="n_scenes"):
        select_heldout_scenes(games, 0)
    with pytest.raises(ValueError, match="games"):
        select_heldout_scenes([], 3)


def test_committed_split_is_what_the_code_computes(tmp_path):
    if not TRAIN.is_dir():
        pytest.skip(f"ALFWorld train games not unpacked at {TRAIN}")
    committed = json.loads(DEFAULT_FILE.read_text())
    again = write_heldout_file(TRAIN, tmp_path / "h.json", committed["n_scenes"], committed["seed"])
    assert again == committed
    scenes = heldout_scenes()
    assert len(scenes) == 15
    shares = [v["heldout"] / (v["heldout"] + v["rest"]) for v in committed["game_folders"].values()]
    assert min(shares) > 0.10  # every task type has games in rooms the model never sees
    g = next(p.name for p in TRAIN.iterdir() if scene_of(p.name) in scenes)
    assert in_heldout_rooms(g) and not in_heldout_rooms(g.rsplit("-", 1)[0] + "-5", scenes=frozenset({6}))
    with pytest.raises(ValueError, match="heldout_rooms"):
        heldout_scenes(tmp_path / "missing.json")


def test_training_data_can_leave_out_the_heldout_rooms(tmp_path):
    """Walkthrough games, DAgger games and agent episodes of held-out rooms are left out on request;
    a dataset or collection folder written before the option resumes as it was made."""
    from metacog_fast.alfworld.finetune.dagger import DaggerConfig
    from metacog_fast.alfworld.finetune.data import _agent_episode_examples, select_walkthrough_games
    from metacog_fast.alfworld.finetune.reflections import claim_collection

    if not TRAIN.is_dir():
        pytest.skip(f"ALFWorld train games not unpacked at {TRAIN}")
    held = heldout_scenes()
    every = select_walkthrough_games("train", None)
    kept = select_walkthrough_games("train", None, exclude_heldout_rooms=True)
    assert {scene_of(g) for g in every} & held and not {scene_of(g) for g in kept} & held
    assert len(every) - len(kept) == json.loads(DEFAULT_FILE.read_text())["trials_heldout"]
    assert [t for t in TASK_TYPES] == [task_type_of(g) for g in kept[:6]]  # still round-robin over the types
    # agent episodes (valid_seen games share train's rooms)
    run = tmp_path / "run" / "episodes"
    for i, g in enumerate((next(g for g in every if scene_of(g) in held), next(g for g in every if scene_of(g) not in held))):
        d = run / f"g{i}"
        d.mkdir(parents=True)
        rec = {"won": True, "gamefile": str(Path("json_2.1.1", "valid_seen", *g.parts[-3:])),
               "begin": {"prefix": "### Your turn\nYou are in a room.\n"}, "pairs": [["look", "ok"]],
               "task_type": task_type_of(g)}
        (d / "test_0.json").write_text(json.dumps(rec))
    assert len(_agent_episode_examples([str(tmp_path / "run")], ("valid_seen",))) == 2
    assert len(_agent_episode_examples([str(tmp_path / "run")], ("valid_seen",), exclude_heldout_rooms=True)) == 1
    # a DAgger collection folder from before the option still resumes
    from dataclasses import asdict

    old = asdict(DaggerConfig())
    old.pop("exclude_heldout_rooms")
    (tmp_path / "col").mkdir()
    (tmp_path / "col" / "config.json").write_text(json.dumps(old))
    claim_collection(tmp_path / "col", asdict(DaggerConfig()), defaults=asdict(DaggerConfig()))
    with pytest.raises(ValueError, match="another configuration"):
        claim_collection(tmp_path / "col", asdict(DaggerConfig(exclude_heldout_rooms=True)), defaults=asdict(DaggerConfig()))


def test_heldout_rooms_is_an_evaluation_split_and_never_training_data():
    """``split="heldout_rooms"``: the train games of the held-out scenes, round-robin over the task
    types like every split, played by runs and evaluations, refused by every training collection."""
    from metacog_fast.alfworld.config import RunConfig
    from metacog_fast.alfworld.env import list_games
    from metacog_fast.alfworld.finetune.dagger import DaggerConfig
    from metacog_fast.alfworld.finetune.data import DataConfig
    from metacog_fast.alfworld.finetune.reflections import ReflectionDataConfig
    from metacog_fast.alfworld.protocol import select_games

    if not TRAIN.is_dir():
        pytest.skip(f"ALFWorld train games not unpacked at {TRAIN}")
    held, train = list_games("heldout_rooms"), list_games("train")
    scenes = heldout_scenes()
    assert held == [g for g in train if scene_of(g) in scenes]
    assert len(held) == json.loads(DEFAULT_FILE.read_text())["trials_heldout"]
    picked = select_games("heldout_rooms", 12)
    assert [g["task_type"] for g in picked[:6]] == list(TASK_TYPES)
    assert all(scene_of(g["gamefile"]) in scenes for g in picked)
    RunConfig(split="heldout_rooms").validate()
    for make in (lambda: DataConfig(split="heldout_rooms"), lambda: DataConfig(episode_splits=("heldout_rooms",)),
                 lambda: DaggerConfig(split="heldout_rooms"), lambda: ReflectionDataConfig(split="heldout_rooms")):
        with pytest.raises(ValueError, match="heldout_rooms"):
            make().validate()
