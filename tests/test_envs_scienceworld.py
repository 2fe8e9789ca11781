"""ScienceWorld adapter against the real simulator (a JVM behind py4j)."""
from __future__ import annotations

import os
import signal
import time

import pytest

pytest.importorskip("scienceworld")

from metacog_fast.envs import EnvSetupError, make_env  # noqa: E402
from metacog_fast.scienceworld import env as swe  # noqa: E402

if swe.java_version() is None:
    pytest.skip("Java is not installed: " + swe.JAVA_HINT, allow_module_level=True)


@pytest.fixture(scope="module")
def env():
    e = swe.ScienceWorldEnv(task="find-non-living-thing", split="train")
    yield e
    e.close()


def _play_gold(e):
    done, info = False, {}
    while not done:
        action = e.expert()
        if action is None:
            break
        _, _, done, info = e.step(action)
    return info


def test_gold_path_solves_and_protocol_fields(env):
    obs, info = env.reset(variation=env.variations[0])
    assert isinstance(obs, str) and obs
    assert "non-living thing" in info["task"]
    assert isinstance(info["admissible"], list) and len(info["admissible"]) > 10
    assert info["score"] == 0 and info["won"] is False and info["errored"] is False
    gold = env.gold_path
    assert gold and gold[0] in info["admissible"]
    info = _play_gold(env)
    assert info["won"] is True and info["score"] == 100.0
    assert env.timings.steps >= len(gold) and env.timings.step_seconds > 0 and env.timings.resets >= 1


def test_variations_follow_the_split(env):
    train = env.variations
    assert train and all(isinstance(v, int) for v in train)
    env._cycle = 0
    _, a = env.reset()
    _, b = env.reset()
    assert [a["variation"], b["variation"]] == train[:2]
    dev = make_env("scienceworld", task="find-non-living-thing", split="dev")
    assert not set(dev.variations) & set(train)
    with pytest.raises(ValueError, match=r"variation: .* is not in the 'train' split"):
        env.reset(variation=dev.variations[0])
    dev.close()


def test_tasks_by_name_id_or_index():
    assert len(swe.task_names()) == 30
    assert swe.resolve_task(0) == "boil"
    assert swe.resolve_task(12) == swe.resolve_task("4-2") == swe.resolve_task("find-non-living-thing")
    assert swe.resolve_task("29") == "mendelian-genetics-unknown-plant"
    with pytest.raises(ValueError, match="task: unknown ScienceWorld task 'boil-the-ocean'"):
        swe.resolve_task("boil-the-ocean")
    with pytest.raises(ValueError, match="task: index 30 out of range"):
        swe.resolve_task(30)


def test_killed_jvm_marks_episode_errored_and_run_continues(env):
    env.reset(variation=env.variations[0])
    env.step(env.expert())
    pid = env.jvm_pid
    os.kill(pid, signal.SIGKILL)  # the JVM this adapter started
    for _ in range(100):
        if not env.jvm_alive():
            break
        time.sleep(0.05)
    obs, reward, done, info = env.step(env.expert() or "look around")
    assert done is True and info["errored"] is True and "error" in info and reward == 0.0
    assert env.jvm_pid != pid and env.jvm_alive() and env.restarts >= 1
    _, info = env.reset(variation=env.variations[0])
    assert info["errored"] is False and info["admissible"]
    assert _play_gold(env)["won"] is True
    # A JVM that dies between episodes is replaced by the next reset.
    os.kill(env.jvm_pid, signal.SIGKILL)
    time.sleep(0.3)
    _, info = env.reset(variation=env.variations[0])
    assert info["errored"] is False and info["admissible"]


def test_missing_java_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    swe.java_version.cache_clear()
    try:
        with pytest.raises(EnvSetupError, match="apt-get install -y default-jre-headless"):
            swe.ScienceWorldEnv(task=0)
    finally:
        swe.java_version.cache_clear()


def test_bad_inputs_have_clear_errors(env):
    with pytest.raises(ValueError, match="split: expected one of"):
        swe.ScienceWorldEnv(task=0, split="validation")
    with pytest.raises(ValueError, match="task: unknown ScienceWorld task"):
        make_env("scienceworld", task="nope")
    env.reset(variation=env.variations[0])
    with pytest.raises(TypeError, match="action: expected a text command"):
        env.step(["look"])
