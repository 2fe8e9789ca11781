"""MUSE-WM self-assessment labels (docs/design.md §3) and the episode replay."""
from __future__ import annotations

import numpy as np
import pytest

from metacog_fast.metaworld.train.replay import Episode, EpisodeRecorder, ReplayBuffer


def _episode(T: int, t_success: int | None, T_max: int = 100, O: int = 3, A: int = 2) -> Episode:
    rec = EpisodeRecorder(np.zeros(O, np.float32), A, "task", T_max, "test")
    for t in range(1, T + 1):
        ok = t_success is not None and t >= t_success
        rec.add(np.full(O, t, np.float32), np.full(A, t / 10, np.float32), float(t), ok)
    return rec.finish()


@pytest.mark.parametrize(
    "t_success, expected",
    [
        (1, [1, 1, 1, 1, 1]),       # success at the first step: every quantile
        (20, [1, 1, 1, 1, 1]),      # exactly at the end of quantile 1 (20 = 1/5 * 100)
        (21, [0, 1, 1, 1, 1]),
        (60, [0, 0, 1, 1, 1]),
        (61, [0, 0, 0, 1, 1]),
        (100, [0, 0, 0, 0, 1]),
        (None, [0, 0, 0, 0, 0]),    # never: all zeros
    ],
)
def test_labels_follow_first_success_step(t_success, expected):
    ep = _episode(100, t_success)
    assert ep.t_success == (t_success if t_success is not None else -1)
    lab = ep.labels(5)
    assert lab.shape == (101, 5)
    # the same label row for every step of the episode, the reset observation included
    np.testing.assert_array_equal(lab, np.tile(np.array(expected, np.float32), (101, 1)))


def test_labels_use_first_success_not_later_ones():
    ep = _episode(100, 70)
    ep.success[30] = True  # an earlier isolated success step counts as the first one
    assert ep.t_success == 30
    np.testing.assert_array_equal(ep.labels(5)[0], [0, 1, 1, 1, 1])


def test_episode_layout_and_round_trip(tmp_path):
    ep = _episode(10, 4, T_max=10)
    assert ep.steps == 10
    np.testing.assert_array_equal(ep.prev_action[0], 0.0)          # no action before the reset obs
    np.testing.assert_allclose(ep.prev_action[3], 0.3)              # action that led to obs[3]
    ep.extra["psi"] = np.random.default_rng(0).random((11, 5)).astype(np.float32)
    ep.save(tmp_path / "ep.npz")
    back = Episode.load(tmp_path / "ep.npz")
    for k in ("obs", "prev_action", "reward", "success"):
        np.testing.assert_array_equal(getattr(back, k), getattr(ep, k))
    np.testing.assert_array_equal(back.extra["psi"], ep.extra["psi"])
    assert (back.task, back.T_max, back.t_success) == ("task", 10, 4)


def test_malformed_episode_file_is_refused(tmp_path):
    p = tmp_path / "bad.npz"
    np.savez(p, obs=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="not a valid episode file"):
        Episode.load(p)


def test_replay_sampling_shapes_and_alignment(tmp_path):
    buf = ReplayBuffer(tmp_path / "replay", N=5)
    buf.add(_episode(40, 9, T_max=40))
    buf.add(_episode(40, None, T_max=40))
    rng = np.random.default_rng(0)
    b = buf.sample(rng, 64, 8)
    assert b["obs"].shape == (64, 8, 3) and b["prev_action"].shape == (64, 8, 2)
    assert b["reward"].shape == (64, 8) and b["labels"].shape == (64, 8, 5) and b["cont"].shape == (64, 8)
    # obs value t was produced by action t/10 with reward t: rows stay aligned inside a sequence
    np.testing.assert_allclose(b["prev_action"][..., 0], b["obs"][..., 0] / 10, atol=1e-6)
    np.testing.assert_allclose(b["reward"], b["obs"][..., 0])
    # both episodes are sampled and carry their own labels ([0,1,1,1,1] for t_success=9 of 40, vs zeros)
    sums = b["labels"].sum((1, 2))
    assert set(np.unique(sums)) == {0.0, 32.0}


def test_replay_resume_drops_files_after_checkpoint(tmp_path):
    buf = ReplayBuffer(tmp_path / "r", N=5)
    for i in range(4):
        buf.add(_episode(5, i + 1, T_max=5))
    again = ReplayBuffer(tmp_path / "r", N=5)
    again.load_dir(keep=2)
    assert len(again) == 2
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["ep_000000.npz", "ep_000001.npz"]
    with pytest.raises(ValueError, match="longer than every stored episode"):
        again.sample(np.random.default_rng(0), 1, 50)
