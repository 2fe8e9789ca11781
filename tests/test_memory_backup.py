"""MemoryStore.backup (SQLite's online backup API) while a writer adds records, and damaged SQLite
files: an error that names the file and what to do, never a bare sqlite3 error."""
from __future__ import annotations

import os
import sqlite3
import threading
import time

import numpy as np
import pytest

from metacog_fast.memory import DamagedStoreError, MemoryStore

D = 16


def _emb(rng, n):
    return rng.standard_normal((n, D)).astype(np.float32)


def test_backup_while_a_writer_adds(tmp_path):
    rng = np.random.default_rng(0)
    s = MemoryStore.open(tmp_path / "live.db", dim=D, synchronous="NORMAL")
    s.add(_emb(rng, 2000), 5, 1.0, "a", "obs", text=[f"first {i}" for i in range(2000)])
    s.retrieve(_emb(rng, 1), 5, 10.0)  # a pending last_access update: written before the copy
    stop = threading.Event()
    acked: list[np.ndarray] = []
    errors: list[BaseException] = []

    def writer():
        wrng = np.random.default_rng(1)
        try:
            i = 0
            while not stop.is_set():
                acked.append(s.add(_emb(wrng, 50), 1 + i % 10, 2.0 + i, "w", "obs", text=f"batch {i}"))
                i += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    th = threading.Thread(target=writer)
    th.start()
    try:
        while len(acked) < 5 and th.is_alive():  # the writer is running
            time.sleep(0.001)
        before = sum(len(a) for a in acked) + 2000
        copies = [s.backup(tmp_path / f"copy{j}.db") for j in range(3)]
        after_first = sum(len(a) for a in acked) + 2000
    finally:
        stop.set()
        th.join()
    assert not errors
    assert len(acked) > 5  # writes went on while copies were taken
    # one batch may be committed but not yet acknowledged when the counter is read
    assert before <= copies[0] <= after_first + 50
    assert copies == sorted(copies)
    for j, n in enumerate(copies):
        path = tmp_path / f"copy{j}.db"
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # whole batches only: each add is one transaction
        per_batch = conn.execute("SELECT text, COUNT(*) FROM records WHERE agent='w' GROUP BY text").fetchall()
        assert all(c == 50 for _, c in per_batch)
        conn.close()
        with MemoryStore.open(path, dim=D) as c:
            assert len(c) == n
            assert c.open_report["index"].startswith("rebuilt")  # the index is derived, not copied
            ids = np.concatenate([np.arange(1, 2001)] + [a for a in acked if a[-1] <= n])
            got = c.get(ids[:: max(1, len(ids) // 200)])
            assert all(r is not None for r in got)
            r = c.get([1])[0]
            assert r.text == "first 0"
            np.testing.assert_array_equal(r.embedding, s.get([1])[0].embedding)
    with MemoryStore.open(tmp_path / "copy0.db", dim=D) as c:
        touched = [r for r in c.get(np.arange(1, 2001)) if r.last_access == 10.0]
    assert touched  # the retrieval's last_access update reached the copy
    assert len(s) == 2000 + sum(len(a) for a in acked)
    s.close()


def test_backup_bad_paths(tmp_path):
    with MemoryStore.open(tmp_path / "m.db", dim=D) as s:
        s.add(_emb(np.random.default_rng(0), 10), 3, 0.0, "a", "obs")
        with pytest.raises(ValueError, match="own file"):
            s.backup(tmp_path / "m.db")
        with pytest.raises(FileNotFoundError, match="does not exist"):
            s.backup(tmp_path / "no" / "such" / "dir" / "x.db")
        assert s.backup(str(tmp_path / "ok.db")) == 10
        assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def _damaged(tmp_path, how):
    path = tmp_path / f"{how}.db"
    rng = np.random.default_rng(2)
    with MemoryStore.open(path, dim=D) as s:
        s.add(_emb(rng, 3000), 5, 1.0, "a", "obs", text=["x" * 200] * 3000)
    data = bytearray(path.read_bytes())
    if how == "pages":
        data[8192: 8192 + 40_000] = np.random.default_rng(3).integers(0, 256, 40_000, dtype=np.uint8).tobytes()
    else:  # header: not a database any more
        data[:100] = b"\x00" * 100
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("how", ["pages", "header"])
def test_damaged_sqlite_file_names_the_file_and_the_remedy(tmp_path, how):
    path = _damaged(tmp_path, how)
    with pytest.raises(DamagedStoreError) as ei:
        MemoryStore.open(path, dim=D)
    msg = str(ei.value)
    assert str(path) in msg and "backup()" in msg and ".recover" in msg
    assert ei.value.path == str(path)
    assert isinstance(ei.value.__cause__, sqlite3.DatabaseError)


def test_non_damage_sqlite_errors_pass_through(tmp_path):
    """A locked database is not damage: the sqlite3 error is raised as it is."""
    path = tmp_path / "m.db"
    with MemoryStore.open(path, dim=D) as s:
        s.add(_emb(np.random.default_rng(0), 5), 3, 0.0, "a", "obs")
        other = sqlite3.connect(path, timeout=0.05, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        s._db.conn.execute("PRAGMA busy_timeout=50")
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            s.add(_emb(np.random.default_rng(1), 5), 3, 0.0, "a", "obs")
        other.execute("ROLLBACK")
        other.close()
