"""Task functions for the harness tests (tests/test_runs_*.py): real work, real processes.

``chain_group`` plays ``episodes`` episodes that share state: each episode's value is a SHA-256
chain of ``work`` rounds started from the previous episode's value, so a resumed or rerun group
gives the same values only if it rebuilt its state from the records written. ``die_marker``:
the first time any task reaches episode ``die_at`` mid-episode, it creates the marker file and
kills its own worker process with SIGKILL (every time with ``die_always``).
"""
from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from metacog_fast.runs import Record, SideFile


def chain_key(group: str, i: int) -> str:
    return f"episodes/{group}/ep_{i}"


def chain_value(seed: str, work: int) -> str:
    h = seed.encode()
    for _ in range(work):
        h = hashlib.sha256(h).digest()
    return h.hex()


def chain_group(payload: Mapping[str, Any], done: Mapping[str, Any], workdir: Path) -> Iterator[Record | SideFile]:
    group, n, work = payload["group"], payload["episodes"], payload["work"]
    state = group
    log = workdir / "log.txt"
    for i in range(n):
        key = chain_key(group, i)
        if key in done:
            state = done[key]["value"]
            continue
        half = chain_value(state, work // 2)
        marker = payload.get("die_marker")
        if marker and i == payload.get("die_at", 0) and (payload.get("die_always") or not os.path.exists(marker)):
            Path(marker).write_text(f"{group} {i} {os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        if payload.get("sleep"):
            time.sleep(payload["sleep"])
        state = chain_value(half, work - work // 2)
        with open(log, "a") as f:
            f.write(f"{key}\n")
        yield Record(key, {"group": group, "episode": i, "value": state, "pid": os.getpid(), "nice": os.nice(0),
                           "resumed_from": len(done)})
        yield SideFile(f"logs/{group}.txt", log.read_bytes())


def chain_tasks(groups: int, episodes: int, work: int, **extra: Any) -> list:
    from metacog_fast.runs import Task

    return [Task(f"g{j}", {"group": f"g{j}", "episodes": episodes, "work": work, **extra},
                 tuple(chain_key(f"g{j}", i) for i in range(episodes))) for j in range(groups)]


def expected_values(group: str, episodes: int, work: int) -> list[str]:
    out, state = [], group
    for _ in range(episodes):
        state = chain_value(chain_value(state, work // 2), work - work // 2)
        out.append(state)
    return out


if __name__ == "__main__":  # a run in its own process, for the kill test
    import sys

    from metacog_fast.runs import ExecutorConfig, RunFolder, run_tasks

    folder_path, executor, groups, episodes, work, sleep = sys.argv[1:7]
    folder = RunFolder(folder_path, {"groups": int(groups), "episodes": int(episodes), "work": int(work)})
    s = run_tasks(folder, chain_tasks(int(groups), int(episodes), int(work), sleep=float(sleep)), chain_group,
                  ExecutorConfig(executor=executor, workers=2, progress=False))
    print(s.as_dict(), flush=True)
