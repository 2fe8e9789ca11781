"""Crash safety, index rebuild and concurrency of the MemoryStore (docs/design.md §1.4, issue 7)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from metacog_fast.memory import MemoryStore

D = 32

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from metacog_fast.memory import MemoryStore
    path, dim = sys.argv[1], int(sys.argv[2])
    s = MemoryStore.open(path, dim=dim, save_every=120, ef_construction=64)
    rng = np.random.default_rng(0)
    print("READY", flush=True)
    b = 0
    while True:
        e = rng.standard_normal((50, dim)).astype(np.float32)
        ids = s.add(e, 1 + (b % 10), float(b), "writer", "obs", text=[f"b{b}-{i}" for i in range(50)])
        print("ACK " + " ".join(map(str, ids.tolist())), flush=True)
        if b % 7 == 3:  # forgets too, so that some reopens must rebuild
            print("FORGETTING " + " ".join(map(str, ids[:5].tolist())), flush=True)
            s.forget(ids[:5])
            print("FORGOT " + " ".join(map(str, ids[:5].tolist())), flush=True)
        b += 1
""")


def _self_found(store: MemoryStore, ids: np.ndarray) -> bool:
    """Every record is its own nearest neighbour on relevance alone (fast path)."""
    recs = store.get(ids)
    q = np.stack([r.embedding for r in recs])
    got = store.retrieve(q, 1, 0.0, weights=(0.0, 1.0, 0.0), touch=False)
    return all(g[0].tolist() == [i] for g, i in zip(got, ids.tolist()))


@pytest.mark.parametrize("acks_before_kill", [7, 23])
def test_kill_9_mid_batch_keeps_acknowledged(tmp_path, acks_before_kill):
    path = str(tmp_path / "crash.db")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, str(D)], stdout=subprocess.PIPE, text=True,
                            env=os.environ.copy())
    acked, forgot, forgetting = [], set(), set()  # forgetting: either state is fine (killed meanwhile)
    try:
        assert proc.stdout.readline().strip() == "READY"
        while len(acked) < acks_before_kill * 50:
            line = proc.stdout.readline()
            assert line, "writer died early"
            tag, *nums = line.split()
            {"ACK": acked}.get(tag, []).extend(int(x) for x in nums)
            {"FORGOT": forgot, "FORGETTING": forgetting}.get(tag, set()).update(int(x) for x in nums)
        time.sleep(0.01 * (acks_before_kill % 5))  # land somewhere inside the next batch
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    # lines printed before the kill but not read yet are acknowledged too
    for line in proc.stdout.read().splitlines():
        tag, *nums = line.split()
        {"ACK": acked}.get(tag, []).extend(int(x) for x in nums)
        {"FORGOT": forgot, "FORGETTING": forgetting}.get(tag, set()).update(int(x) for x in nums)
    live = np.array(sorted(set(acked) - forgetting), np.int64)
    with MemoryStore.open(path, dim=D, exact_below=16) as s:
        assert s.open_report["index"].startswith(("rebuilt", "loaded")), s.open_report
        recs = s.get(live)
        assert all(r is not None for r in recs), "an acknowledged record was lost"
        assert s.get(np.array(sorted(forgot), np.int64)) == [None] * len(forgot)
        assert len(s) >= len(live)
        assert s._index.element_count >= len(s)
        sample = np.random.default_rng(1).choice(live, size=min(40, len(live)), replace=False)
        assert _self_found(s, sample)
        q = np.random.default_rng(2).standard_normal((8, D)).astype(np.float32)
        fast = s.retrieve(q, 10, 1e4, touch=False)
        exact = s.retrieve(q, 10, 1e4, touch=False, exact=True)
        assert np.mean([len(set(a[0]) & set(b[0])) / 10 for a, b in zip(fast, exact)]) >= 0.95


def _make(path, n=600, seed=0):
    rng = np.random.default_rng(seed)
    with MemoryStore.open(path, dim=D) as s:
        ids = s.add(rng.standard_normal((n, D)).astype(np.float32), rng.integers(1, 11, n),
                    rng.uniform(0, 1e5, n), "a", "obs")
    return ids


def test_corrupt_index_is_rebuilt(tmp_path):
    path = str(tmp_path / "m.db")
    ids = _make(path)
    with open(path + ".hnsw", "r+b") as f:
        f.seek(os.path.getsize(path + ".hnsw") // 2)
        f.write(b"\xff" * 4096)
    with MemoryStore.open(path, dim=D) as s:
        assert s.open_report["index"] == "rebuilt (index file checksum does not match the sidecar)"
        assert len(s) == len(ids) and _self_found(s, ids[::37])
    with MemoryStore.open(path, dim=D) as s:  # the rebuilt index was saved
        assert s.open_report["index"] == "loaded"


@pytest.mark.parametrize("damage", ["truncate", "no_index", "no_sidecar", "bad_sidecar", "garbage_same_size"])
def test_damaged_index_files_are_rebuilt(tmp_path, damage):
    path = str(tmp_path / "m.db")
    ids = _make(path)
    idx = path + ".hnsw"
    if damage == "truncate":
        with open(idx, "r+b") as f:
            f.truncate(1000)
    elif damage == "no_index":
        os.remove(idx)
    elif damage == "no_sidecar":
        os.remove(idx + ".json")
    elif damage == "bad_sidecar":
        with open(idx + ".json", "w") as f:
            f.write("{not json")
    else:
        size = os.path.getsize(idx)
        with open(idx, "wb") as f:
            f.write(np.random.default_rng(0).bytes(size))
    with MemoryStore.open(path, dim=D) as s:
        assert s.open_report["index"].startswith("rebuilt"), s.open_report
        assert len(s) == len(ids) and _self_found(s, ids[::41])


def test_stale_index_caught_up_or_rebuilt(tmp_path):
    path = str(tmp_path / "m.db")
    ids = _make(path)
    saved = {p: open(p, "rb").read() for p in (path + ".hnsw", path + ".hnsw.json")}
    rng = np.random.default_rng(5)
    with MemoryStore.open(path, dim=D) as s:
        more = s.add(rng.standard_normal((40, D)).astype(np.float32), 4, 0.0, "a", "obs")
    for p, b in saved.items():  # put back the older index: adds happened since
        open(p, "wb").write(b)
    with MemoryStore.open(path, dim=D) as s:
        assert s.open_report["index"] == "loaded, caught up 40 records"
        assert _self_found(s, more[::7]) and _self_found(s, ids[::50])
        s.forget(ids[:10])
    saved = {p: open(p, "rb").read() for p in (path + ".hnsw", path + ".hnsw.json")}
    with MemoryStore.open(path, dim=D) as s:
        s.forget(ids[10:20])
    for p, b in saved.items():  # an index from before a forget can only be rebuilt
        open(p, "wb").write(b)
    with MemoryStore.open(path, dim=D) as s:
        assert s.open_report["index"].startswith("rebuilt (records were forgotten")
        got = s.retrieve(s.get(ids[20:21])[0].embedding, 30, 0.0, weights=(0, 1, 0), touch=False)[0][0]
        assert not set(got.tolist()) & set(ids[:20].tolist())


def test_concurrent_readers_during_writes(tmp_path):
    rng = np.random.default_rng(3)
    s = MemoryStore.open(tmp_path / "m.db", dim=D, exact_below=16, save_every=300)
    s.add(rng.standard_normal((200, D)).astype(np.float32), 5, 0.0, "a", "obs")
    errors, reads = [], [0]
    stop = threading.Event()
    added: list[int] = []

    def reader(seed):
        r = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                agent = None if r.random() < 0.5 else "b"
                for got, sc in s.retrieve(r.standard_normal((4, D)).astype(np.float32), 5, 1e3, agent=agent):
                    assert len(got) <= 5 and np.all(np.diff(sc) <= 1e-6)
                reads[0] += 1
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    try:
        for b in range(30):
            added.extend(s.add(rng.standard_normal((40, D)).astype(np.float32), 1 + b % 10, float(b),
                               "b" if b % 2 else "a", "obs").tolist())
            if b % 10 == 9:
                s.forget(np.array(added[-20:]))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    assert reads[0] > 0
    assert len(s) == 200 + 30 * 40 - 3 * 20
    q = rng.standard_normal((10, D)).astype(np.float32)
    fast = s.retrieve(q, 10, 1e3, touch=False)
    exact = s.retrieve(q, 10, 1e3, touch=False, exact=True)
    assert np.mean([len(set(a[0]) & set(b[0])) / 10 for a, b in zip(fast, exact)]) >= 0.95
    s.close()


def test_leftover_temp_files_removed(tmp_path):
    path = str(tmp_path / "m.db")
    _make(path, n=50)
    for p in (path + ".hnsw.tmp-999999", path + ".hnsw.json.tmp-999999"):
        open(p, "wb").write(b"half a save")
    with MemoryStore.open(path, dim=D) as s:
        assert s.open_report["index"] == "loaded" and len(s) == 50
    assert sorted(os.listdir(tmp_path)) == ["m.db", "m.db-shm", "m.db-wal", "m.db.hnsw", "m.db.hnsw.json", "m.db.lock"] or \
        not any(".tmp-" in f for f in os.listdir(tmp_path))
