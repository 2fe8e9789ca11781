"""Episodes per hour of the one run harness (metacog_fast.runs) on a real ALFWorld episode set:
1 local worker process (the anchor), 2 local worker processes, and Ray with 2 workers (a local
2-CPU cluster on 127.0.0.1, started before the clock, as a cluster that already runs).

Episode set: ReAct on GAMES valid_train games of GAMES task types (one harness task per type),
EPISODES test episodes per game of at most MAX_STEPS steps, embedded SmolLM2 (1 llama.cpp thread
per worker), temperature 0. Every round plays the whole set into a fresh run folder, so each
worker's setup (LLM, MiniLM, ALFWorld) is inside the measured time, as in a real run. The records
of every executor are compared with the anchor's (same actions, same outcomes).

Run under the benchmark lock (docs: the benchmark protocol):
    bash bench/memory_locked.sh .venv/bin/python -m pytest bench/bench_runs.py \
        --benchmark-json=bench/results/runs_episodes.json
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from metacog_fast.alfworld.config import AgentConfig, RunConfig
from metacog_fast.alfworld.protocol import episode_plan, load_records, run_protocol, select_games
from metacog_fast.runs import ExecutorConfig

GAMES = 4
EPISODES = 2
MAX_STEPS = 8
CFG = RunConfig(agent="react", tasks=GAMES, adapt_episodes=0, test_episodes=EPISODES, n_ctx=4096,
                agent_config=AgentConfig(examples=1, max_steps=MAX_STEPS))
RESULTS: dict[str, dict] = {}
"""Per executor: wall seconds and the records (pairs, won) of its last round."""


def _records(folder: Path) -> dict[str, list]:
    return {g["game"]: [(r["pairs"], r["won"]) for r in load_records(folder, g["game"], episode_plan(CFG))]
            for g in select_games(CFG.split, CFG.tasks)}


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    from metacog_fast.runs.ray_executor import start_local_cluster

    t = time.perf_counter()
    start_local_cluster(2)  # as the executor starts one: workers at the driver's priority
    start_s = time.perf_counter() - t
    yield start_s
    ray.shutdown()


CASES = {
    "local_1": lambda: ExecutorConfig(executor="process", workers=1, progress=False),
    "local_2": lambda: ExecutorConfig(executor="process", workers=2, progress=False),
    "ray_2": lambda: ExecutorConfig(executor="ray", progress=False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_episodes_per_hour(benchmark, case, request):
    if case == "ray_2":
        cluster_start_s = request.getfixturevalue("ray_cluster")
    executor = CASES[case]()
    load_before = os.getloadavg()
    folders: list[Path] = []

    def fresh_folder():
        folders.append(Path(tempfile.mkdtemp(prefix=f"bench-runs-{case}-")))
        return (folders[-1],), {}

    def play(folder: Path) -> dict:
        return run_protocol(folder, CFG, executor=executor)

    res = benchmark.pedantic(play, setup=fresh_folder, rounds=1, iterations=1, warmup_rounds=0)
    episodes = GAMES * EPISODES
    assert res["episodes_played"] == episodes and res["harness"]["reruns"] == 0
    wall = benchmark.stats.stats.median
    RESULTS[case] = {"wall_s": wall, "records": _records(folders[-1])}
    extra = {"executor": res["harness"]["executor"], "workers": 1 if case == "local_1" else 2,
             "episodes": episodes, "games": GAMES, "task_groups": len({g["task_type"] for g in select_games(CFG.split, GAMES)}),
             "max_steps": MAX_STEPS, "wall_s": wall, "episodes_per_hour": 3600.0 * episodes / wall,
             "steps_played": sum(len(p) for recs in RESULTS[case]["records"].values() for p, _ in recs),
             "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
    if case == "ray_2":
        extra["ray_cluster_start_s_not_timed"] = cluster_start_s
    if case != "local_1":
        anchor = RESULTS.get("local_1")
        assert anchor is not None, "run the anchor (local_1) in the same session"
        extra["anchor"] = "local_1 (1 local worker process), same episode set, same session"
        extra["episodes_per_hour_ratio_vs_local_1"] = anchor["wall_s"] / wall
        extra["same_records_as_local_1"] = RESULTS[case]["records"] == anchor["records"]
    benchmark.extra_info.update(extra)
    for f in folders:
        shutil.rmtree(f, ignore_errors=True)
