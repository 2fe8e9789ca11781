"""Meta-World v3 adapter against the real metaworld/MuJoCo environment."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("metaworld")

from metacog_fast.envs import EpisodeFinishedError, make_env  # noqa: E402
from metacog_fast.metaworld.env import MT10_TASKS, NOVEL_TASKS  # noqa: E402
from metacog_fast.metaworld.env import STATE_DIM, MetaWorldEnv, all_task_names, make_raw  # noqa: E402


def test_task_lists_are_real_metaworld_tasks():
    names = set(all_task_names())
    assert len(MT10_TASKS) == 10 and len(NOVEL_TASKS) == 10
    assert set(MT10_TASKS) <= names and set(NOVEL_TASKS) <= names
    assert not set(MT10_TASKS) & set(NOVEL_TASKS)


def test_expert_solves_reach_and_protocol_fields():
    env = make_env("metaworld", task="reach-v3", seed=1, terminate_on_success=True)
    obs, info = env.reset()
    assert obs.shape == (STATE_DIM + 20,) and obs.dtype == np.float32
    assert info["task"] == "reach-v3" and info["admissible"] is None and info["success"] is False
    one_hot = obs[STATE_DIM:]
    assert one_hot.sum() == 1.0 and one_hot[MT10_TASKS.index("reach-v3")] == 1.0
    done, success, steps = False, False, 0
    while not done:
        obs, reward, done, info = env.step(env.expert())
        steps += 1
        assert isinstance(reward, float) and isinstance(info["success"], bool)
        success |= info["success"]
    assert success and info["success"] and steps < 500
    assert env.timings.resets == 1 and env.timings.steps == steps
    assert env.timings.step_seconds > 0 and env.timings.reset_seconds > 0
    with pytest.raises(EpisodeFinishedError, match="reset"):
        env.step(np.zeros(4))
    env.close()


def test_episode_ends_at_max_steps_without_success():
    env = MetaWorldEnv(task="push", max_episode_steps=7)
    env.reset()
    dones = [env.step(np.zeros(4, dtype=np.float32))[2] for _ in range(7)]
    assert dones == [False] * 6 + [True]
    env.close()


def test_observation_matches_raw_metaworld_state():
    """The adapter's first 39 entries are exactly what the raw Meta-World env returns."""
    env = MetaWorldEnv(task="drawer-close-v3", seed=3, randomize=False)
    raw = make_raw("drawer-close-v3", seed=3)
    obs, _ = env.reset()
    raw_obs, _ = raw.reset()
    np.testing.assert_allclose(obs[:STATE_DIM], raw_obs.astype(np.float32), rtol=0, atol=1e-6)
    a = np.array([0.3, -0.2, 0.1, 0.5], dtype=np.float32)
    obs, r, _, info = env.step(a)
    raw_obs, raw_r, _, _, raw_info = raw.step(a)
    np.testing.assert_allclose(obs[:STATE_DIM], raw_obs.astype(np.float32), rtol=0, atol=1e-6)
    assert r == pytest.approx(float(raw_r)) and info["success"] == bool(raw_info["success"])
    env.close()
    raw.close()


def test_seeding_and_domain_randomisation():
    a = MetaWorldEnv(task="push-v3", seed=5)
    b = MetaWorldEnv(task="push-v3", seed=5)
    first_a = [a.reset()[0] for _ in range(3)]
    first_b = [b.reset()[0] for _ in range(3)]
    for x, y in zip(first_a, first_b):
        np.testing.assert_array_equal(x, y)  # same seed -> same layouts
    assert not np.allclose(first_a[0], first_a[1])  # randomised across resets
    fixed = MetaWorldEnv(task="push-v3", seed=5, randomize=False)
    o1, o2 = fixed.reset()[0], fixed.reset()[0]
    np.testing.assert_array_equal(o1, o2)
    reseeded = [a.reset(seed=11)[0], a.reset(seed=11)[0]]
    np.testing.assert_array_equal(reseeded[0], reseeded[1])
    for e in (a, b, fixed):
        e.close()


def test_novel_task_aliases_and_zero_embedding():
    env = MetaWorldEnv(task="push-block", zero_task_embedding=True)
    assert env.task == "push-back-v3"
    obs, _ = env.reset()
    assert not obs[STATE_DIM:].any()
    env.close()
    outside = MetaWorldEnv(task="hammer", one_hot_tasks=MT10_TASKS, zero_task_embedding=True)
    assert outside.observation_dim == STATE_DIM + 10
    outside.close()


def test_bad_inputs_have_clear_errors():
    with pytest.raises(ValueError, match="task: unknown Meta-World v3 task 'reach-v9'"):
        make_env("metaworld", task="reach-v9")
    with pytest.raises(ValueError, match="not in one_hot_tasks"):
        MetaWorldEnv(task="hammer-v3")
    with pytest.raises(ValueError, match="max_episode_steps"):
        MetaWorldEnv(task="reach", max_episode_steps=501)
    with pytest.raises(ValueError, match="name: unknown environment"):
        make_env("mujoco-soup")
    with pytest.raises(ValueError, match="unexpected keyword"):
        make_env("metaworld", taks="reach")
    env = MetaWorldEnv(task="reach")
    with pytest.raises(EpisodeFinishedError):
        env.step(np.zeros(4))
    env.reset()
    with pytest.raises(ValueError, match=r"action: expected shape \(4,\)"):
        env.step(np.zeros(3))
    with pytest.raises(ValueError, match="action: expected finite"):
        env.step(np.array([0.0, np.nan, 0.0, 0.0]))
    env.close()
