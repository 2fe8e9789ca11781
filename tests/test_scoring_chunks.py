"""Chunking, rendering, the ALFWorld chunk builder and the replay buffer (no model needed)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from metacog_fast.scoring import ReplayBuffer, chunk_episode, render_chunk, render_trajectory
from metacog_fast.scoring.datasets import (
    build_chunk_dataset,
    default_alfworld_root,
    load_game,
    split_by_game,
    task_text,
    templated_observation,
)
from metacog_fast.scoring.replay import ADAPT, PRE


def _alfworld_or_skip():
    try:
        return default_alfworld_root()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def test_chunk_episode_sizes():
    pairs = [(f"a{i}", f"o{i}") for i in range(10)]
    chunks = chunk_episode(pairs)
    assert [len(c) for c in chunks] == [4, 4, 2]
    assert chunks[1][0] == ("a4", "o4")  # non-overlapping: chunk 2 starts at pair 5
    assert [len(c) for c in chunk_episode(pairs[:3])] == [3]  # fewer than 4 pairs: one partial chunk
    assert chunk_episode([]) == []
    assert [len(c) for c in chunk_episode(pairs, size=5)] == [5, 5]


def test_chunk_empty_observations_and_render():
    chunks = chunk_episode([("go to desk 1", ""), ("use  desklamp 1", None), ("look", "You see\n a lamp.")])
    assert chunks == [[("go to desk 1", ""), ("use desklamp 1", ""), ("look", "You see a lamp.")]]
    text = render_chunk(chunks[0])
    assert text == "> go to desk 1\n> use desklamp 1\n> look\nYou see a lamp."
    assert render_trajectory(chunks[0], "find the lamp.") == text + "\nPlan: find the lamp."
    assert render_trajectory(chunks[0], "  ") == text


@pytest.mark.parametrize(
    "bad,exc,match",
    [
        ("go to desk", TypeError, "sequence of"),
        ([("", "obs")], ValueError, "non-empty action"),
        ([("a", "b", "c")], TypeError, "pair"),
        ([("a", 3)], TypeError, "observation"),
    ],
)
def test_chunk_bad_input(bad, exc, match):
    with pytest.raises(exc, match=match):
        chunk_episode(bad)


def test_chunk_bad_size_and_empty_render():
    with pytest.raises(ValueError, match="size"):
        chunk_episode([("a", "b")], size=0)
    with pytest.raises(ValueError, match="empty chunk"):
        render_chunk([])
    with pytest.raises(TypeError, match="plan"):
        render_trajectory([("a", "b")], None)  # type: ignore[arg-type]


def test_templates():
    assert task_text("pick_clean_then_place_in_recep-Bowl-None-Cabinet-10") == "put a clean bowl in cabinet."
    assert task_text("look_at_obj_in_light-AlarmClock-None-DeskLamp-323") == "look at alarmclock under the desklamp."
    assert templated_observation("take apple 1 from diningtable 2") == "You pick up the apple 1 from the diningtable 2."
    assert templated_observation("move cd 2 to drawer 3") == "You put the cd 2 in/on the drawer 3."
    assert templated_observation("jump around") == "Nothing happens."
    with pytest.raises(ValueError, match="task_folder"):
        task_text("nonsense")


def test_load_game_errors(tmp_path):
    d = tmp_path / "pick_and_place_simple-Pen-None-Desk-1" / "trial_1"
    d.mkdir(parents=True)
    (d / "game.tw-pddl").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_game(d / "game.tw-pddl")
    (d / "game.tw-pddl").write_text(json.dumps({"walkthrough": []}))
    with pytest.raises(ValueError, match="walkthrough"):
        load_game(d / "game.tw-pddl")
    (d / "game.tw-pddl").write_text(json.dumps({"walkthrough": ["go to desk 1", "take pen 1 from desk 1"]}))
    g = load_game(d / "game.tw-pddl")
    assert g.task == "put a pen in desk." and g.task_type == "pick_and_place_simple"
    with pytest.raises(FileNotFoundError, match="split"):
        build_chunk_dataset(tmp_path, split="valid_seen")


def test_alfworld_dataset_real_games():
    root = _alfworld_or_skip()
    data = build_chunk_dataset(root, split="valid_seen", max_games=40, seed=1)
    assert data == build_chunk_dataset(root, split="valid_seen", max_games=40, seed=1)  # deterministic
    pos = [e for e in data if e.label == 1]
    neg = [e for e in data if e.label == 0]
    assert len(pos) == len(neg) > 40
    assert {e.kind for e in neg} == {"shuffled", "foreign", "repeated"}
    assert all(1 <= len(e.chunk) <= 4 for e in data)
    # positives are consecutive walkthrough actions of their own game
    games = {e.game: e for e in pos}
    for e in pos[:20]:
        walk = load_game(root / "json_2.1.1" / "valid_seen" / e.game / "game.tw-pddl").walkthrough
        acts = [a for a, _ in e.chunk]
        assert any(list(walk[s : s + len(acts)]) == acts for s in range(len(walk)))
    assert len(games) == 40
    train, test = split_by_game(data, 0.25, seed=0)
    assert {e.game for e in train}.isdisjoint({e.game for e in test})
    assert len(train) + len(test) == len(data)


def test_replay_mix_and_capacity():
    rb = ReplayBuffer(capacity=50, dim=4, seed=0)
    rb.add(np.zeros((1, 4), np.float32), np.zeros((80, 4), np.float32), np.ones(80), PRE)
    assert rb.size(PRE) == 50  # reservoir keeps capacity
    rb.add(np.ones((30, 4), np.float32), np.ones((30, 4), np.float32), np.zeros(30), ADAPT)
    t, x, y = rb.sample(100, mix=0.3)
    assert t.shape == (100, 4) and x.shape == (100, 4)
    assert int((y == 1).sum()) == 30  # 30 % from the pre-deployment pool (all label 1)
    # FIFO: adaptation pool overwrites its oldest rows
    rb.add(np.full((1, 4), 2, np.float32), np.full((40, 4), 2, np.float32), np.ones(40), ADAPT)
    assert rb.size(ADAPT) == 50
    _, xa, _ = rb.arrays(ADAPT)
    assert int((xa[:, 0] == 2).sum()) == 40
    with pytest.raises(ValueError, match="labels"):
        rb.add(np.zeros((1, 4)), np.zeros((2, 4)), np.array([0, 2]), PRE)
    with pytest.raises(ValueError, match="traj_emb"):
        rb.add(np.zeros((1, 4)), np.zeros((2, 3)), np.array([0, 1]), PRE)
    with pytest.raises(ValueError, match="empty"):
        ReplayBuffer(5, 4).sample(3)
