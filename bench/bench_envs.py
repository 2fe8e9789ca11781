"""Environment adapter benchmarks (issue 2): step rates and ALFWorld reset cost.

    pytest bench/bench_envs.py --benchmark-json=bench/results/envs.json

Anchors, measured in the same run with the same work, ratios in ``extra_info``:
- Meta-World: the raw metaworld env (``metaworld_env.make_raw``, what the tests compare
  against) stepping the same 500 fixed random actions -> ``overhead_ratio`` = adapter
  time / raw time (1.0 = free).
- ALFWorld steps: the plain textworld gym env of the data README
  (``alfworld_env.make_textworld_gym_env``) with this package's parse caches off,
  playing the same walkthrough -> ``time_ratio_vs_raw`` (< 1 = the adapter is faster).
- ALFWorld reset: the plain gym env's reset with the translation cache uninstalled
  (what every reset costs without this package), the adapter's first (cold) reset with
  an emptied cache, and its reset of the game already loaded (cached).
- ScienceWorld: the very ``scienceworld.ScienceWorldEnv`` the adapter wraps (same JVM, same
  loaded variation; ``env.raw``) playing the same gold path.
Reset is never inside a timed step loop (pedantic ``setup``); anchor and adapter rounds
alternate (the anchor round runs, timed by hand, inside the adapter round's setup).
"""
from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any, Callable

import numpy as np
import pytest

from metacog_fast.alfworld import cache as alfworld_cache
from metacog_fast.alfworld.env import AlfWorldEnv, list_games, make_textworld_gym_env
from metacog_fast.metaworld.env import MetaWorldEnv, make_raw
from metacog_fast.scienceworld.env import ScienceWorldEnv, java_version

MW_TASK = "push-v3"
MW_STEPS = 500
MW_ROUNDS = 10
AW_SPLIT = "valid_seen"
AW_ROUNDS = 5
SW_TASKS = ("find-non-living-thing", "identify-life-stages-1")
SW_ROUNDS = 7


def _median_seconds(fn: Callable[[], Any], setup: Callable[[], Any], rounds: int) -> float:
    """Median wall time of ``fn`` over ``rounds``, ``setup`` untimed before each."""
    times = []
    for _ in range(rounds):
        setup()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _interleaved(anchor: Callable[[], Any], anchor_setup: Callable[[], Any], adapter_setup: Callable[[], Any],
                 anchor_times: list[float]) -> Callable[[], None]:
    """A pedantic ``setup`` that first times one anchor round, then prepares the adapter round.

    Anchor and adapter rounds alternate, so a busy machine slows both alike and the ratio holds.
    """

    def setup() -> None:
        anchor_setup()
        t0 = time.perf_counter()
        anchor()
        anchor_times.append(time.perf_counter() - t0)
        adapter_setup()

    return setup


@pytest.fixture(autouse=True)
def _record_load(benchmark):
    """Other processes share these cores: record the load next to every number."""
    yield
    benchmark.extra_info["loadavg_1m_after"] = os.getloadavg()[0]


# -- Meta-World ----------------------------------------------------------------------------
def test_metaworld_steps(benchmark):
    actions = np.random.default_rng(0).uniform(-1, 1, (MW_STEPS, 4)).astype(np.float32)
    env = MetaWorldEnv(task=MW_TASK, seed=0)
    raw = make_raw(MW_TASK, seed=0)

    def adapter_steps() -> None:
        for a in actions:
            env.step(a)

    def raw_steps() -> None:
        for a in actions:
            raw.step(a)

    raw_times: list[float] = []
    setup = _interleaved(raw_steps, raw.reset, env.reset, raw_times)
    benchmark.pedantic(adapter_steps, setup=setup, rounds=MW_ROUNDS, iterations=1, warmup_rounds=1)
    adapter_s = benchmark.stats.stats.median
    raw_s = statistics.median(raw_times[1:])  # the first belongs to the warm-up round
    benchmark.extra_info.update(
        {
            "task": MW_TASK,
            "steps_per_round": MW_STEPS,
            "adapter_steps_per_s": MW_STEPS / adapter_s,
            "raw_metaworld_steps_per_s": MW_STEPS / raw_s,
            "overhead_ratio": adapter_s / raw_s,
        }
    )
    env.close()
    raw.close()


# -- ALFWorld ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def aw_game() -> int:
    """Index of the game with the longest walkthrough among the first 40 of the split."""
    games = list_games(AW_SPLIT)[:40]
    lengths = [len(json.loads(g.read_text())["walkthrough"]) for g in games]
    return int(np.argmax(lengths))


def test_alfworld_steps(benchmark, aw_game):
    env = AlfWorldEnv(split=AW_SPLIT, game=aw_game)
    env.reset()
    walkthrough = env.walkthrough
    raw = make_textworld_gym_env(env.gamefile)

    def adapter_play() -> None:
        for a in walkthrough:
            env.step(a)

    def raw_play() -> None:
        with alfworld_cache.disabled():
            for a in walkthrough:
                raw.step(a)

    def raw_reset() -> None:
        with alfworld_cache.disabled():
            raw.reset()

    raw_times: list[float] = []
    setup = _interleaved(raw_play, raw_reset, env.reset, raw_times)
    benchmark.pedantic(adapter_play, setup=setup, rounds=AW_ROUNDS, iterations=1)
    adapter_s = benchmark.stats.stats.median
    raw_s = statistics.median(raw_times)
    n = len(walkthrough)
    benchmark.extra_info.update(
        {
            "game": str(env.gamefile),
            "steps_per_round": n,
            "adapter_steps_per_s": n / adapter_s,
            "raw_textworld_steps_per_s": n / raw_s,
            "time_ratio_vs_raw": adapter_s / raw_s,
        }
    )
    raw.close()
    env.close()


def test_alfworld_reset_cached_vs_uncached(benchmark, aw_game):
    gamefile = list_games(AW_SPLIT)[aw_game]
    # Without this package: the README's gym env, real fast_downward (no cache).
    with alfworld_cache.disabled():
        raw = make_textworld_gym_env(gamefile)
        raw_s = _median_seconds(raw.reset, lambda: None, 3)
        raw.close()
    # The adapter's first reset of a game, with nothing cached.
    cold = []
    for _ in range(3):
        alfworld_cache.clear()
        e = AlfWorldEnv(split=AW_SPLIT, game=aw_game)
        t0 = time.perf_counter()
        e.reset()
        cold.append(time.perf_counter() - t0)
        e.close()
    cold_s = statistics.median(cold)
    # The adapter's reset of the game it has loaded: no parse, translation from the cache.
    env = AlfWorldEnv(split=AW_SPLIT, game=aw_game)
    env.reset()
    hits0 = alfworld_cache.TRANSLATION_CACHE.stats.hits
    benchmark.pedantic(env.reset, rounds=10, iterations=1)
    cached_s = benchmark.stats.stats.median
    assert alfworld_cache.TRANSLATION_CACHE.stats.hits > hits0  # the timed resets did use the cache
    benchmark.extra_info.update(
        {
            "game": str(gamefile),
            "raw_textworld_reset_s": raw_s,
            "adapter_cold_reset_s": cold_s,
            "adapter_cached_reset_s": cached_s,
            "speedup_vs_raw": raw_s / cached_s,
            "speedup_vs_cold": cold_s / cached_s,
        }
    )
    env.close()


# -- ScienceWorld --------------------------------------------------------------------------
@pytest.mark.skipif(java_version() is None, reason="ScienceWorld needs Java")
@pytest.mark.parametrize("task", SW_TASKS)
def test_scienceworld_steps(benchmark, task):
    env = ScienceWorldEnv(task=task, split="train")
    variation = env.variations[0]
    env.reset(variation=variation)
    gold = env.gold_path
    # The gold path may run past the winning step; both sides play up to it.
    n = 0
    for a in gold:
        n += 1
        if env.step(a)[2]:
            break
    gold = gold[:n]
    # Anchor: the very scienceworld.ScienceWorldEnv (same JVM, same loaded variation) the adapter wraps.
    raw = env.raw

    def adapter_play() -> None:
        for a in gold:
            env.step(a)

    def raw_play() -> None:
        for a in gold:
            raw.step(a)

    raw_times: list[float] = []
    setup = _interleaved(raw_play, raw.reset, lambda: env.reset(variation=variation), raw_times)
    benchmark.pedantic(adapter_play, setup=setup, rounds=SW_ROUNDS, iterations=1)
    adapter_s = benchmark.stats.stats.median
    raw_s = statistics.median(raw_times)
    benchmark.extra_info.update(
        {
            "task": task,
            "variation": variation,
            "steps_per_round": n,
            "adapter_steps_per_s": n / adapter_s,
            "raw_scienceworld_steps_per_s": n / raw_s,
            "overhead_ratio": adapter_s / raw_s,
            "mean_reset_s": env.timings.mean_reset_seconds,
        }
    )
    env.close()
