"""ALFWorld adapter against real json_2.1.1 games run by textworld."""
from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from metacog_fast.envs import EnvSetupError, EpisodeFinishedError, make_env  # noqa: E402
from metacog_fast.alfworld import cache as alfworld_cache  # noqa: E402
from metacog_fast.alfworld.env import (  # noqa: E402
    AlfWorldEnv,
    find_split_dir,
    list_games,
    make_textworld_gym_env,
    task_type_of,
)

try:
    GAMES = list_games("valid_seen")
except EnvSetupError as exc:  # the whole module needs the games
    pytest.skip(f"ALFWorld games not available: {exc}", allow_module_level=True)


@pytest.fixture(scope="module")
def env():
    e = AlfWorldEnv(split="valid_seen", game=0)
    yield e
    e.close()


def test_walkthrough_wins_and_protocol_fields(env):
    obs, info = env.reset()
    assert isinstance(obs, str) and "Your task is to:" in obs
    assert info["task"] and info["task"] in obs
    assert info["task_type"] == task_type_of(GAMES[0]) == GAMES[0].parent.parent.name.split("-")[0]
    assert isinstance(info["admissible"], list) and info["admissible"]
    assert info["won"] is False
    walkthrough = env.walkthrough
    assert walkthrough and walkthrough[0] in info["admissible"]
    done, steps = False, 0
    while not done:
        action = env.expert()
        assert action == walkthrough[steps]
        obs, reward, done, info = env.step(action)
        steps += 1
    assert info["won"] is True and info["success"] is True and reward == 1.0
    assert steps == len(walkthrough)
    assert env.timings.steps >= steps and env.timings.step_seconds > 0
    with pytest.raises(EpisodeFinishedError):
        env.step("look")


def test_same_observations_as_the_plain_textworld_gym_env(env):
    """With its caches the adapter plays exactly like textworld without them."""
    with alfworld_cache.disabled():
        raw = make_textworld_gym_env(GAMES[4])
        raw_obs, raw_info = raw.reset()
    obs, info = env.reset(game=4)
    assert obs == raw_obs and info["admissible"] == raw_info["admissible_commands"]
    parse_hits = alfworld_cache.TEXTGEN_CACHE.hits
    for action in env.walkthrough + ["look"]:
        with alfworld_cache.disabled():
            raw_obs, raw_score, raw_done, raw_info = raw.step(action)
        obs, score, done, info = env.step(action)
        assert (obs, score, done) == (raw_obs, raw_score, raw_done)
        assert info["admissible"] == raw_info["admissible_commands"] and info["won"] == raw_info["won"]
        if done:
            break
    assert info["won"] is True
    assert alfworld_cache.TEXTGEN_CACHE.hits > parse_hits
    raw.close()


def test_second_reset_hits_the_cache(env):
    env.reset(game=3)  # another game: reloaded, translation computed or cached
    _, first = env.reset(game=3)
    assert first["cache"] == {"game_reloaded": False, "translation_hits": 2, "translation_misses": 0}
    _, back = env.reset(game=0)  # switching back reloads the game but reuses its translation
    assert back["cache"]["game_reloaded"] is True
    assert back["cache"]["translation_misses"] == 0 and back["cache"]["translation_hits"] >= 2


def test_success_is_won_not_done():
    e = AlfWorldEnv(split="valid_seen", game=1, max_episode_steps=3)
    _, info = e.reset()
    done = False
    while not done:
        _, _, done, info = e.step("look")
    assert done and info["won"] is False and info["steps"] == 3
    assert e.expert() is None  # "look" left the walkthrough
    e.close()


def test_games_cycle_when_no_game_given():
    e = AlfWorldEnv(split="valid_seen")
    _, a = e.reset()
    _, b = e.reset()
    assert a["gamefile"] == str(GAMES[0]) and b["gamefile"] == str(GAMES[1])
    e.close()


def test_translation_disk_cache_roundtrip(tmp_path):
    import fast_downward

    game = json.loads(GAMES[5].read_text())
    calls = []

    def counting(domain, problem, verbose=False, optimize=False):
        calls.append(optimize)
        return fast_downward.pddl2sas(domain, problem, verbose=verbose, optimize=optimize)

    c1 = alfworld_cache.TranslationCache(disk_dir=tmp_path)
    task1, sas1 = c1.get_or_compute(counting, game["pddl_domain"], game["pddl_problem"], False, False)
    assert c1.stats.misses == 1 and len(list(tmp_path.glob("*.pkl"))) == 1
    c2 = alfworld_cache.TranslationCache(disk_dir=tmp_path)  # a fresh process would see only the disk
    task2, sas2 = c2.get_or_compute(counting, game["pddl_domain"], game["pddl_problem"], False, False)
    assert c2.stats.disk_hits == 1 and c2.stats.misses == 0 and len(calls) == 1
    assert sas2 == sas1 and [a.name for a in task2.actions] == [a.name for a in task1.actions]
    # A corrupt cache file is a miss, not a crash.
    next(tmp_path.glob("*.pkl")).write_bytes(b"not a pickle")
    c3 = alfworld_cache.TranslationCache(disk_dir=tmp_path)
    _, sas3 = c3.get_or_compute(counting, game["pddl_domain"], game["pddl_problem"], False, False)
    assert c3.stats.misses == 1 and sas3 == sas1
    assert pickle.loads(next(tmp_path.glob("*.pkl")).read_bytes())[1] == sas1


def test_any_folder_with_the_layout_works(tmp_path):
    src = GAMES[2]
    dst = tmp_path / "json_2.1.1" / "valid_train" / src.parent.parent.name / src.parent.name
    dst.mkdir(parents=True)
    os.symlink(src, dst / "game.tw-pddl")
    e = make_env("alfworld", data=str(tmp_path), split="valid_train", game=0)
    _, info = e.reset()
    assert info["task_type"] == task_type_of(src)
    e.close()


def test_missing_data_folder_says_how_to_fix(tmp_path):
    with pytest.raises(EnvSetupError, match="ALFWorld games not found.*Fix: .*(tar -xJf|alfworld-download)"):
        AlfWorldEnv(data=str(tmp_path / "nowhere"))
    (tmp_path / "json_2.1.1" / "train").mkdir(parents=True)
    with pytest.raises(EnvSetupError, match=r"split: 'valid_seen' is not in the ALFWorld data folder \(it has \['train'\]\)"):
        AlfWorldEnv(data=str(tmp_path))


def test_alfworld_data_variable_is_used(tmp_path, monkeypatch):
    src = GAMES[7]
    dst = tmp_path / "json_2.1.1" / "valid_seen" / src.parent.parent.name / src.parent.name
    dst.mkdir(parents=True)
    os.symlink(src, dst / "game.tw-pddl")
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    assert list_games("valid_seen") == [dst / "game.tw-pddl"]
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "empty"))  # no games there: repo data
    assert find_split_dir("valid_seen") == GAMES[0].parent.parent.parent


def test_bad_inputs_have_clear_errors(tmp_path, env):
    with pytest.raises(ValueError, match="split: expected one of"):
        AlfWorldEnv(split="valid_everything")
    with pytest.raises(ValueError, match="game: index 100000 out of range"):
        AlfWorldEnv(game=100000)
    with pytest.raises(ValueError, match="neither a game index nor an existing"):
        env.reset(game=str(tmp_path / "missing.tw-pddl"))
    broken = tmp_path / "pick_and_place_simple-X-None-Y-1" / "trial_0" / "game.tw-pddl"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON"):
        env.reset(game=str(broken))
    broken.write_text(json.dumps({"grammar": ""}))
    with pytest.raises(ValueError, match="lacks"):
        env.reset(game=str(broken))
    env.reset(game=0)
    with pytest.raises(TypeError, match="action: expected a text command"):
        env.step(3)
    assert Path(env.gamefile) == GAMES[0]
