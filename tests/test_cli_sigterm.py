"""A long command killed with SIGTERM takes its worker processes with it (metacog_fast.cli.main.exit_on_sigterm):
before, the pool of `metacog finetune data --workers 2` went on playing its shards, orphaned, after its driver died."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DRIVER = r"""
import multiprocessing as mp, os, sys, time
from metacog_fast.cli.main import exit_on_sigterm

def work(folder):
    open(os.path.join(folder, str(os.getpid())), "w").close()
    time.sleep(120)

if __name__ == "__main__":
    exit_on_sigterm()
    with mp.get_context("spawn").Pool(2) as pool:
        pool.map(work, [sys.argv[1]] * 2, chunksize=1)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_sigterm_ends_the_driver_and_its_pool(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    (tmp_path / "pids").mkdir()
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "pids")], cwd=tmp_path)
    deadline = time.time() + 120
    while time.time() < deadline and len(list((tmp_path / "pids").iterdir())) < 2:
        time.sleep(0.2)
    workers = [int(p.name) for p in (tmp_path / "pids").iterdir()]
    assert len(workers) == 2, "the pool's workers did not start"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    deadline = time.time() + 30
    while time.time() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.2)
    assert not any(_alive(w) for w in workers), "a worker outlived its killed driver"
