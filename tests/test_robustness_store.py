"""Robustness of the MemoryStore (issue 55): one writer per store across real processes, kill -9,
a database older than its index, damaged index files with ``verify_checksum=False``, and
``retrieve`` arguments that used to pass validation. Every test here failed before the fix."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import textwrap
import tracemalloc
import zlib

import hnswlib
import numpy as np
import pytest

from metacog_fast.memory import MemoryStore, StaleDatabaseError, StoreLockedError
from metacog_fast.memory import index as hx

D = 16


def _run(script: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                          timeout=timeout, env=os.environ.copy())


def _make(path: str, n: int = 300, seed: int = 0, **cfg) -> np.ndarray:
    rng = np.random.default_rng(seed)
    with MemoryStore.open(path, dim=D, **cfg) as s:
        return s.add(rng.standard_normal((n, D)).astype(np.float32), rng.integers(1, 11, n),
                     rng.uniform(0, 1e4, n), "a", "obs")


def _index_labels(store: MemoryStore) -> set[int]:
    return set(int(i) for i in store._index.get_ids_list())


def _hnsw_finds_itself(store: MemoryStore, ids: np.ndarray) -> bool:
    """Every record's own embedding finds it first on the HNSW index (not the scan)."""
    q = np.stack([r.embedding for r in store.get(ids)])
    labels, _ = store._index.knn_query(q, k=1)
    return labels[:, 0].astype(np.int64).tolist() == ids.tolist()


# ---------------------------------------------------------------- defect 1: one writer per store

def test_second_open_from_another_process_is_refused_naming_the_holder(tmp_path):
    path = str(tmp_path / "m.db")
    _make(path, n=20)
    with MemoryStore.open(path, dim=D):
        r = _run("""
            import sys
            from metacog_fast.memory import MemoryStore
            try:
                MemoryStore.open(sys.argv[1], dim=int(sys.argv[2]))
            except Exception as exc:
                print(type(exc).__name__, exc)
            else:
                print("OPENED")
        """, path, str(D))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("StoreLockedError"), r.stdout
    assert f"pid {os.getpid()}" in r.stdout and socket.gethostname() in r.stdout and path + ".lock" in r.stdout
    with MemoryStore.open(path, dim=D) as s:  # closed: the lock is free again
        assert len(s) == 20


def test_second_open_in_this_process_is_refused(tmp_path):
    path = str(tmp_path / "m.db")
    s = MemoryStore.open(path, dim=D)
    try:
        with pytest.raises(StoreLockedError, match=f"this process pid {os.getpid()}") as info:
            MemoryStore.open(path, dim=D)
        assert info.value.holder["pid"] == os.getpid() and info.value.path == path
    finally:
        s.close()
    MemoryStore.open(path, dim=D).close()


def test_a_refused_open_leaves_the_holder_working(tmp_path):
    """The refused open must not touch the files or the lock of the store it was refused."""
    path = str(tmp_path / "m.db")
    with MemoryStore.open(path, dim=D) as s:
        with pytest.raises(StoreLockedError):
            MemoryStore.open(path, dim=D)
        ids = s.add(np.random.default_rng(0).standard_normal((30, D)).astype(np.float32), 5, 0.0, "a", "obs")
        assert json.loads(open(path + ".lock").read())["pid"] == os.getpid()
    with MemoryStore.open(path, dim=D) as s:
        assert s.open_report["index"] == "loaded" and _index_labels(s) == set(ids.tolist())


WRITER_TURNS = """
    import sys, time
    import numpy as np
    from metacog_fast.memory import MemoryStore
    try:
        from metacog_fast.memory import StoreLockedError
    except ImportError:  # before issue 55: nothing refuses a second writer
        StoreLockedError = ()
    path, dim, tag, turns = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    rng = np.random.default_rng(int(tag == "b"))
    waits = 0
    for t in range(turns):
        while True:
            try:
                s = MemoryStore.open(path, dim=dim, ef_construction=32, synchronous="NORMAL")
                break
            except StoreLockedError:
                waits += 1
                time.sleep(0.002)
        for _ in range(2):
            s.add(rng.standard_normal((10, dim)).astype(np.float32), 5, float(t), tag, "obs")
        s.close()
    print("DONE", waits, flush=True)
"""


def test_two_writer_processes_lose_no_record_from_the_index(tmp_path):
    """Two real processes write to one store path in turns (open, add, close); before issue 55 both
    opened at once and the last to close saved an index lacking the other's records."""
    path = str(tmp_path / "m.db")
    turns = 8
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER_TURNS), path, str(D), tag, str(turns)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
             for tag in ("a", "b")]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.startswith("DONE"), err
    with MemoryStore.open(path, dim=D, ef_construction=32) as s:
        ids = np.array(sorted(int(r[0]) for r in s._db.conn.execute("SELECT id FROM records")), np.int64)
        assert len(ids) == len(s) == 2 * turns * 20
        assert _index_labels(s) == set(ids.tolist()), "records missing from the index"
        assert _hnsw_finds_itself(s, ids)


KILLED_WRITER = """
    import sys
    import numpy as np
    from metacog_fast.memory import MemoryStore
    s = MemoryStore.open(sys.argv[1], dim=int(sys.argv[2]), save_every=150, ef_construction=32)
    rng = np.random.default_rng(0)
    b = 0
    while True:
        ids = s.add(rng.standard_normal((25, s.config.dim)).astype(np.float32), 1 + b % 10, float(b), "w", "obs")
        print("ACK " + " ".join(map(str, ids.tolist())), flush=True)
        b += 1
"""


def test_kill_9_writer_loses_nothing_committed_and_releases_the_lock(tmp_path):
    path = str(tmp_path / "m.db")
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(KILLED_WRITER), path, str(D)],
                            stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    acked: list[int] = []
    try:
        while len(acked) < 400:
            line = proc.stdout.readline()
            assert line, "writer died early"
            acked.extend(int(x) for x in line.split()[1:])
        # a reader opening while the writer writes is refused (it would never see new records)
        with pytest.raises(StoreLockedError, match=f"pid {proc.pid}"):
            MemoryStore.open(path, dim=D)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    for line in proc.stdout.read().splitlines():  # acknowledged before the kill, not read yet
        if line.startswith("ACK"):
            acked.extend(int(x) for x in line.split()[1:])
    with MemoryStore.open(path, dim=D, ef_construction=32) as s:  # no wait: the kernel released the lock
        assert all(r is not None for r in s.get(np.array(acked))), "an acknowledged record was lost"
        assert _index_labels(s) >= set(acked)
        assert _hnsw_finds_itself(s, np.array(acked[::13], np.int64))


def test_a_forked_copy_cannot_write_nor_release_the_lock(tmp_path):
    path = str(tmp_path / "m.db")
    s = MemoryStore.open(path, dim=D)
    try:
        pid = os.fork()
        if pid == 0:  # child: the inherited store refuses to work, and closing it keeps the parent's lock
            code = 1
            try:
                s.add(np.ones((1, D), np.float32), 5, 0.0, "a", "obs")
            except RuntimeError as exc:
                code = 0 if "forked copy" in str(exc) else 2
            s.close()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        r = _run("""
            import sys
            from metacog_fast.memory import MemoryStore, StoreLockedError
            try:
                MemoryStore.open(sys.argv[1], dim=int(sys.argv[2]))
            except StoreLockedError:
                print("LOCKED")
        """, path, str(D))
        assert r.stdout.strip() == "LOCKED", r.stdout + r.stderr
        s.add(np.ones((1, D), np.float32), 5, 0.0, "a", "obs")
    finally:
        s.close()


def _write_behind_the_store(path: str) -> int:
    """Insert one record with plain sqlite3 (a writer that ignores the lock); returns its id."""
    c = sqlite3.connect(path, isolation_level=None)
    try:
        c.execute("BEGIN IMMEDIATE")
        c.execute("INSERT INTO records (agent, kind, created, last_access, importance, embedding) "
                  "VALUES ('x', 'obs', 0, 0, 5, ?)", (np.ones(D, np.float32).tobytes(),))
        c.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='seq'")
        c.execute("COMMIT")
        return int(c.execute("SELECT max(id) FROM records").fetchone()[0])
    finally:
        c.close()


def test_record_written_behind_the_stores_back_reaches_the_index(tmp_path):
    """A record written to the database behind the store's back (a writer that ignores the lock),
    then records of the store's own: before, the index was saved stamped with the database's seq and
    a max id past the foreign record, so every later open trusted an index that lacked it. Now the
    sidecar carries the seq the index reflects, and the open compares the index's labels with the
    database's records."""
    path = str(tmp_path / "m.db")
    ids = _make(path, n=50)
    with MemoryStore.open(path, dim=D) as s:
        outside = _write_behind_the_store(path)
        s.add(np.random.default_rng(1).standard_normal((5, D)).astype(np.float32), 5, 0.0, "a", "obs")
    with MemoryStore.open(path, dim=D) as s:
        assert s.open_report["index"] == ("rebuilt (index file damaged: its 55 live labels are not the "
                                          "database's 56 records up to the sidecar's max id)"), s.open_report
        assert outside in _index_labels(s) and len(s) == len(ids) + 6
        assert _hnsw_finds_itself(s, np.array([outside]))


def test_index_lacking_records_with_a_matching_sidecar_is_rebuilt(tmp_path):
    """The index the old two-writer race left behind: right seq, right size and checksum, but some
    records missing. The labels are checked against the database on open."""
    path = str(tmp_path / "m.db")
    ids = _make(path, n=200)
    idx = hnswlib.Index(space="cosine", dim=D)
    idx.load_index(path + ".hnsw", max_elements=400, allow_replace_deleted=True)
    for i in ids[10:20].tolist():
        idx.mark_deleted(i)
    idx.save_index(path + ".hnsw")
    side = json.loads(open(path + ".hnsw.json").read())
    side.update(size=os.path.getsize(path + ".hnsw"), sha256=hx.file_digest(path + ".hnsw", "sha256"))
    open(path + ".hnsw.json", "w").write(json.dumps(side))
    with MemoryStore.open(path, dim=D) as s:
        assert s.open_report["index"].startswith("rebuilt (index file damaged: its 190 live labels"), s.open_report
        assert _index_labels(s) == set(ids.tolist()) and _hnsw_finds_itself(s, ids[10:20])


# ---------------------------------------------------------------- defect 2: a database older than its index

@pytest.mark.parametrize("loss", ["zero_bytes", "deleted", "older_copy", "new_empty_store"])
def test_database_older_than_its_index_is_an_error_not_a_rebuild(tmp_path, loss):
    path = str(tmp_path / "m.db")
    ids = _make(path, n=120)
    if loss == "older_copy":
        with MemoryStore.open(path, dim=D) as s:
            s.backup(str(tmp_path / "copy.db"))
            s.add(np.ones((3, D), np.float32), 5, 0.0, "a", "obs")
        shutil.copyfile(tmp_path / "copy.db", path)
    elif loss == "new_empty_store":
        os.remove(path)
        MemoryStore.open(str(tmp_path / "other.db"), dim=D).close()
        shutil.copyfile(tmp_path / "other.db", path)
    elif loss == "zero_bytes":
        open(path, "wb").close()
    else:
        os.remove(path)
    index_before = open(path + ".hnsw", "rb").read()
    with pytest.raises(StaleDatabaseError) as info:
        MemoryStore.open(path, dim=D)
    msg = str(info.value)
    assert path in msg and path + ".hnsw" in msg and "older than its index" in msg and "backup()" in msg
    assert open(path + ".hnsw", "rb").read() == index_before, "the index was overwritten"
    assert json.loads(open(path + ".hnsw.json").read())["seq"] >= 1
    # the lock was released, and the recovery step (move the index files aside) opens the database
    for p in (path + ".hnsw", path + ".hnsw.json"):
        os.replace(p, p + ".aside")
    with MemoryStore.open(path, dim=D) as s:
        assert s.open_report["index"].startswith("rebuilt")
        assert len(s) == {"older_copy": len(ids), "new_empty_store": 0}.get(loss, 0)


def test_the_index_keeps_the_embeddings_for_salvage(tmp_path):
    """The recovery step the error names: the kept index still gives every record's embedding."""
    path = str(tmp_path / "m.db")
    ids = _make(path, n=40)
    with MemoryStore.open(path, dim=D) as s:
        want = np.stack([r.embedding for r in s.get(ids)])
    os.remove(path)
    with pytest.raises(StaleDatabaseError):
        MemoryStore.open(path, dim=D)
    idx = hnswlib.Index(space="cosine", dim=D)
    idx.load_index(path + ".hnsw")
    got = np.asarray(idx.get_items(ids.tolist()), np.float32)
    want = want / np.linalg.norm(want, axis=1, keepdims=True)
    assert sorted(idx.get_ids_list()) == ids.tolist() and np.allclose(got, want, atol=1e-5)


# ---------------------------------------------------------------- defect 6: damaged index, verify_checksum=False

OPEN_AND_QUERY = """
    import sys
    import numpy as np
    from metacog_fast.memory import MemoryStore
    s = MemoryStore.open(sys.argv[1], dim=int(sys.argv[2]), M=8, ef_construction=32, verify_checksum=False,
                         exact_below=16, exact_filtered_below=0)
    q = np.random.default_rng(5).standard_normal((20, s.config.dim)).astype(np.float32)
    for w in ((0, 1, 0), (1, 1, 1)):
        s.retrieve(q, 10, 1e4, weights=w, touch=False)
    labels, _ = s._index.knn_query(q, k=10)
    print(s.open_report["index"])
    s.close()
"""


def _damage(path: str, how: str) -> None:
    idx = path + ".hnsw"
    raw = bytearray(open(idx, "rb").read())
    n = int.from_bytes(raw[16:24], "little")
    per = int.from_bytes(raw[24:32], "little")
    if how == "ff_block":
        mid = len(raw) // 2
        raw[mid: mid + 4096] = b"\xff" * 4096
    elif how == "neighbour_past_end":  # one level-0 neighbour id of every 7th element points past the end
        for e in range(0, n, 7):
            o = 96 + e * per + 4
            raw[o: o + 4] = (n + 1000 + e).to_bytes(4, "little")
    elif how == "neighbour_count":
        for e in range(0, n, 5):
            o = 96 + e * per
            raw[o: o + 2] = (200).to_bytes(2, "little")
    else:  # upper levels: garbage in the last quarter of the link lists
        tail = 96 + n * per
        start = tail + (len(raw) - tail) * 3 // 4
        raw[start:] = np.random.default_rng(0).bytes(len(raw) - start)
    open(idx, "wb").write(bytes(raw))


@pytest.mark.parametrize("how", ["ff_block", "neighbour_past_end", "neighbour_count", "upper_levels"])
def test_damaged_index_with_verify_checksum_false_is_rebuilt_not_loaded(tmp_path, how):
    """Same-size damage passes the size check; the structure check (always on) keeps it from hnswlib.
    Before: loaded, and the first approximate retrieve segfaulted (run in a subprocess here)."""
    path = str(tmp_path / "m.db")
    ids = _make(path, n=1500, M=8, ef_construction=32)
    _damage(path, how)
    r = _run(OPEN_AND_QUERY, path, str(D))
    assert r.returncode == 0, f"rc {r.returncode}: {r.stderr[-2000:]}"
    assert r.stdout.startswith("rebuilt (index file damaged"), r.stdout
    with MemoryStore.open(path, dim=D, M=8, ef_construction=32) as s:  # the rebuilt index was saved
        assert s.open_report["index"] == "loaded" and _index_labels(s) == set(ids.tolist())


def test_vector_damage_is_caught_by_the_sha256(tmp_path):
    path = str(tmp_path / "m.db")
    _make(path, n=200)
    raw = bytearray(open(path + ".hnsw", "rb").read())
    per = int.from_bytes(raw[24:32], "little")
    o = 96 + 50 * per + 4 + 4 * 2 * 16  # element 50's vector (M=16: 2M level-0 links)
    raw[o: o + 8] = b"\x00\x00\xc0\x7f" * 2  # NaN: same size, same structure
    open(path + ".hnsw", "wb").write(bytes(raw))
    with MemoryStore.open(path, dim=D) as s:
        assert s.open_report["index"] == "rebuilt (index file checksum does not match the sidecar)"


def test_format_1_sidecar_still_loads(tmp_path):
    """Sidecars written before issue 55 (crc32, no sha256) are read: a store is not rebuilt for it."""
    path = str(tmp_path / "m.db")
    _make(path, n=100)
    side = json.loads(open(path + ".hnsw.json").read())
    del side["sha256"]
    side.update(format=1, crc32=zlib.crc32(open(path + ".hnsw", "rb").read()))
    open(path + ".hnsw.json", "w").write(json.dumps(side))
    with MemoryStore.open(path, dim=D) as s:
        assert s.open_report["index"] == "loaded"
    assert json.loads(open(path + ".hnsw.json").read())["format"] == 1  # nothing changed: not rewritten


# ---------------------------------------------------------------- defect 4: retrieve arguments

@pytest.fixture
def small_store(tmp_path):
    s = MemoryStore.open(tmp_path / "m.db", dim=D)
    rng = np.random.default_rng(0)
    s.add(rng.standard_normal((26, D)).astype(np.float32), rng.integers(1, 11, 26), rng.uniform(0, 100, 26), "a", "obs")
    yield s
    s.close()


@pytest.mark.parametrize("exact", [False, True])
def test_all_zero_weights_are_refused_naming_weights(small_store, exact):
    q = np.ones((2, D), np.float32)
    with pytest.raises(ValueError, match="weights: .*not all 0"):
        small_store.retrieve(q, 5, 0.0, weights=(0, 0, 0), exact=exact)
    with pytest.raises(ValueError, match="weights"):
        small_store.retrieve(q, 5, 0.0, weights=(0, -1, 0))


@pytest.mark.parametrize("exact", [False, True])
def test_k_is_clamped_to_the_record_count(small_store, exact):
    q = np.random.default_rng(1).standard_normal((3, D)).astype(np.float32)
    want = small_store.retrieve(q, 26, 50.0, exact=True, touch=False)
    tracemalloc.start()
    try:
        got = small_store.retrieve(q, 10 ** 8, 50.0, exact=exact, touch=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2 ** 20, f"{peak / 2 ** 20:.0f} MiB allocated for 26 records"
    for (gi, gs), (wi, ws) in zip(got, want):
        assert gi.tolist() == wi.tolist() and np.allclose(gs, ws)


# ---------------------------------------------------------------- backup targets

def test_backup_refuses_a_target_store_that_is_open(tmp_path):
    src, dst = str(tmp_path / "m.db"), str(tmp_path / "copy.db")
    _make(src, n=20)
    _make(dst, n=5, seed=1)
    with MemoryStore.open(dst, dim=D) as other, MemoryStore.open(src, dim=D) as s:
        with pytest.raises(StoreLockedError, match="copy.db"):
            s.backup(dst)
        assert len(other) == 5 and other.get([1])[0] is not None
    with MemoryStore.open(dst, dim=D) as other:
        assert len(other) == 5


def test_backup_over_an_earlier_copy_opens(tmp_path):
    """An earlier copy that was opened and written to has an index ahead of the next copy's
    database; the backup removes those index files, so the new copy opens (index rebuilt)."""
    src, dst = str(tmp_path / "m.db"), str(tmp_path / "copy.db")
    _make(src, n=20)
    with MemoryStore.open(src, dim=D) as s:
        s.backup(dst)
    with MemoryStore.open(dst, dim=D) as c:
        c.add(np.ones((30, D), np.float32), 5, 0.0, "c", "obs")
    with MemoryStore.open(src, dim=D) as s:
        s.backup(dst)
    with MemoryStore.open(dst, dim=D) as c:
        assert len(c) == 20 and c.open_report["index"].startswith("rebuilt")
