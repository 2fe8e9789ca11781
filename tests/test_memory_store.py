"""MemoryStore (docs/design.md §1.4): retrieval vs brute force, recency, filters, forget, reopen, bad input."""
from __future__ import annotations

import os
import sqlite3

import numpy as np
import pytest

from metacog_fast.ops.memory.naive import exact_scan_numpy
from metacog_fast.memory import MemoryConfig, MemoryStore, SchemaError

D = 48
HOUR = 3600.0
NOW = 500 * HOUR


def _unit(rng, n, d=D):
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _clustered(rng, n, n_clusters=40, noise=0.6):
    c = _unit(rng, n_clusters)
    x = c[rng.integers(0, n_clusters, n)] + rng.standard_normal((n, D)).astype(np.float32) * noise / np.sqrt(D)
    return x, c


def _fill(store, rng, n=3000):
    emb, centres = _clustered(rng, n)
    agents = [f"a{i}" for i in rng.integers(0, 5, n)]
    kinds = [("obs", "reflection")[i] for i in rng.integers(0, 2, n)]
    imp = rng.integers(1, 11, n)
    created = rng.uniform(0, NOW, n)
    ids = store.add(emb, imp, created, agents, kinds, text=[f"memory {i}" for i in range(n)])
    return ids, dict(emb=emb, agents=np.array(agents), kinds=np.array(kinds), imp=imp.astype(np.float64),
                     created=created, centres=centres)


def brute_force(emb, last_access, imp, ids, q, k, now, w=(1.0, 1.0, 1.0)):
    """Independent float64 brute force of the docs/design.md §1.4 score: ids best first."""
    e = emb.astype(np.float64)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    qq = q.astype(np.float64) / np.linalg.norm(q)
    score = (w[0] * 0.995 ** ((now - last_access) / 3600.0) + w[1] * (e @ qq + 1) / 2 + w[2] * imp / 10)
    order = np.argsort(-score, kind="stable")[:k]
    return ids[order], score[order]


@pytest.fixture
def store(tmp_path):
    s = MemoryStore.open(tmp_path / "mem.db", dim=D, exact_below=64, ef_construction=100)
    yield s
    s.close()


def _recall(a, b):
    return np.mean([len(set(x[0].tolist()) & set(y[0].tolist())) / max(len(y[0]), 1) for x, y in zip(a, b)])


def test_retrieve_matches_exact_and_brute_force(store):
    rng = np.random.default_rng(0)
    ids, d = _fill(store, rng)
    q = d["centres"][:20] + 0.3 * _unit(rng, 20)
    fast = store.retrieve(q, 10, NOW, touch=False)
    exact = store.retrieve(q, 10, NOW, touch=False, exact=True)
    assert _recall(fast, exact) >= 0.95
    for qi, (eids, escores) in zip(q, exact):
        bids, bscores = brute_force(d["emb"], d["created"], d["imp"], ids, qi, 10, NOW)
        assert eids.tolist() == bids.tolist()
        np.testing.assert_allclose(escores, bscores, atol=1e-5)
        assert np.all(np.diff(escores) <= 0)
    # the numpy anchor used by the benchmark agrees too
    t = store._table
    scan = exact_scan_numpy(t.keys, t.last_access, t.importance, t.filter_rows(None, None, None),
                            (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32), 10, NOW)
    for (rows, _), (eids, _) in zip(scan, exact):
        assert t.row_id[rows].tolist() == eids.tolist()


def test_weights_and_only_relevance(store):
    rng = np.random.default_rng(1)
    ids, d = _fill(store, rng, 1500)
    q = _unit(rng, 5)
    for w in [(0.0, 1.0, 0.0), (2.0, 0.5, 1.0), (1.0, 0.0, 1.0)]:
        fast = store.retrieve(q, 10, NOW, weights=w, touch=False)
        exact = store.retrieve(q, 10, NOW, weights=w, touch=False, exact=True)
        assert _recall(fast, exact) >= 0.95
        for qi, (eids, _) in zip(q, exact):
            bids, _ = brute_force(d["emb"], d["created"], d["imp"], ids, qi, 10, NOW, w)
            assert eids.tolist() == bids.tolist()


def test_recency_is_time_based(store):
    rng = np.random.default_rng(2)
    e = _unit(rng, 1)
    old, new = store.add(np.repeat(e, 2, 0), 5, [0.0, 10 * HOUR], "a", "obs")
    (got, s), = store.retrieve(e, 2, 10 * HOUR, touch=False)
    assert got.tolist() == [new, old]
    assert s[0] - s[1] == pytest.approx(1 - 0.995**10, abs=1e-6)


def test_retrieve_updates_last_access(store):
    rng = np.random.default_rng(3)
    ids, _ = _fill(store, rng, 300)
    q = _unit(rng, 1)
    (got, _), = store.retrieve(q, 5, NOW + 7.0)
    recs = store.get(got)
    assert all(r.last_access == NOW + 7.0 for r in recs)
    others = store.get(np.setdiff1d(ids, got)[:20])
    assert all(r.last_access < NOW for r in others)
    # a touched record now beats its untouched twin
    twin = store.add(recs[0].embedding, recs[0].importance, recs[0].created, recs[0].agent, recs[0].kind)
    peek = store.retrieve(recs[0].embedding, 400, NOW + 8.0, touch=False)[0][0].tolist()
    assert peek.index(recs[0].id) < peek.index(int(twin[0]))


def test_filters(store):
    rng = np.random.default_rng(4)
    ids, d = _fill(store, rng, 3000)
    q = _unit(rng, 6)
    since = NOW / 2
    for flt in [dict(agent="a2"), dict(kind="reflection"), dict(since=since), dict(agent="a1", kind="obs", since=since)]:
        fast = store.retrieve(q, 10, NOW, touch=False, **flt)
        exact = store.retrieve(q, 10, NOW, touch=False, exact=True, **flt)
        assert _recall(fast, exact) >= 0.95, flt
        m = np.ones(len(ids), bool)
        if "agent" in flt:
            m &= d["agents"] == flt["agent"]
        if "kind" in flt:
            m &= d["kinds"] == flt["kind"]
        if "since" in flt:
            m &= d["created"] >= flt["since"]
        for qi, (eids, _) in zip(q, exact):
            bids, _ = brute_force(d["emb"][m], d["created"][m], d["imp"][m], ids[m], qi, 10, NOW)
            assert eids.tolist() == bids.tolist()
        for got, _ in fast:
            assert set(got.tolist()) <= set(ids[m].tolist())
    assert store.retrieve(q, 3, NOW, agent="nobody")[0][0].size == 0


def test_fewer_records_than_k(store):
    rng = np.random.default_rng(5)
    ids = store.add(_unit(rng, 3), [1, 5, 10], 0.0, "a", "obs")
    (got, s), = store.retrieve(_unit(rng, 1), 10, HOUR)
    assert sorted(got.tolist()) == sorted(ids.tolist()) and len(s) == 3


def test_forget_and_slot_reuse(store):
    rng = np.random.default_rng(6)
    ids, d = _fill(store, rng, 1000)
    n_slots = store._index.element_count
    gone = ids[:100]
    assert store.forget(gone) == 100
    assert len(store) == 900
    assert store.get(gone[:3]) == [None, None, None]
    q = d["emb"][:50]
    for got, _ in store.retrieve(q, 10, NOW, touch=False):
        assert not set(got.tolist()) & set(gone.tolist())
    new = store.add(_unit(rng, 100), 5, NOW, "a0", "obs")
    assert store._index.element_count == n_slots  # deleted slots reused
    assert len(store) == 1000 and new.min() > ids.max()  # ids are never reused
    n_a3 = int((d["agents"][100:] == "a3").sum())
    assert store.forget(agent="a3") == n_a3
    n_old = int(((d["created"][100:] < NOW / 4) & (d["agents"][100:] != "a3") & (d["kinds"][100:] == "obs")).sum())
    assert store.forget(kind="obs", before=NOW / 4) == n_old
    assert len(store) == 1000 - n_a3 - n_old
    fast = store.retrieve(q, 10, NOW, touch=False)
    exact = store.retrieve(q, 10, NOW, touch=False, exact=True)
    assert _recall(fast, exact) >= 0.95


def test_update_importance(store):
    rng = np.random.default_rng(7)
    ids, d = _fill(store, rng, 800)
    store.update_importance(ids[:400], 10)
    assert store.get(ids[:1])[0].importance == 10
    q = _unit(rng, 8)
    fast = store.retrieve(q, 10, NOW, touch=False)
    exact = store.retrieve(q, 10, NOW, touch=False, exact=True)
    assert _recall(fast, exact) >= 0.95
    imp = d["imp"].copy()
    imp[:400] = 10
    for qi, (eids, _) in zip(q, exact):
        assert eids.tolist() == brute_force(d["emb"], d["created"], imp, ids, qi, 10, NOW)[0].tolist()
    with pytest.raises(KeyError, match="ids"):
        store.update_importance([10**9], 3)


def test_get_round_trip(store):
    rng = np.random.default_rng(8)
    e = rng.standard_normal((2, D)).astype(np.float32) * 3
    ids = store.add(e, [2.5, 9], [10.0, 20.0], ["x", "y"], "plan", text=["go", None], location="kitchen",
                    meta=[{"a": 1}, None])
    r0, r1 = store.get(ids)
    assert (r0.agent, r0.kind, r0.text, r0.location, r0.created, r0.importance, r0.meta) == \
        ("x", "plan", "go", "kitchen", 10.0, 2.5, {"a": 1})
    assert r1.text is None and r1.meta is None and r1.last_access == 20.0
    np.testing.assert_array_equal(r0.embedding, e[0])


def test_reopen_keeps_everything(tmp_path):
    rng = np.random.default_rng(9)
    path = tmp_path / "m.db"
    with MemoryStore.open(path, dim=D, exact_below=64) as s:
        ids, d = _fill(s, rng, 1500)
        s.forget(ids[:10])
        q = _unit(rng, 5)
        (touched, _), = s.retrieve(q[:1], 5, NOW + 1)
        before = s.retrieve(q, 10, NOW + 2, touch=False, exact=True)
    with MemoryStore.open(path, dim=D, exact_below=64) as s:
        assert s.open_report["index"] == "loaded"
        assert len(s) == 1490
        assert all(r.last_access == NOW + 1 for r in s.get(touched))
        after = s.retrieve(q, 10, NOW + 2, touch=False, exact=True)
        assert [a[0].tolist() for a in after] == [b[0].tolist() for b in before]
        assert _recall(s.retrieve(q, 10, NOW + 2, touch=False), after) >= 0.95
        s.add(_unit(rng, 5), 3, NOW, "a", "obs")
    with MemoryStore.open(path, dim=D) as s:
        assert len(s) == 1495 and s.open_report["index"] == "loaded"


def test_index_saved_every_n_adds(tmp_path):
    rng = np.random.default_rng(10)
    path = tmp_path / "m.db"
    s = MemoryStore.open(path, dim=D, save_every=200)
    s.add(_unit(rng, 150), 3, 0.0, "a", "obs")
    assert not os.path.exists(str(path) + ".hnsw.json") or s._index_seq != s._db.seq()[0]
    s.add(_unit(rng, 100), 3, 0.0, "a", "obs")
    assert s._index_seq == s._db.seq()[0] and os.path.exists(str(path) + ".hnsw")
    s.close()


def test_bad_input(store, tmp_path):
    rng = np.random.default_rng(11)
    e = _unit(rng, 3)
    with pytest.raises(ValueError, match=r"embeddings: expected shape \[N, 48\]"):
        store.add(_unit(rng, 3, 12), 5, 0.0, "a", "obs")
    bad = e.copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="embeddings: contains NaN"):
        store.add(bad, 5, 0.0, "a", "obs")
    with pytest.raises(ValueError, match="zero vector"):
        store.add(np.zeros((1, D)), 5, 0.0, "a", "obs")
    with pytest.raises(ValueError, match=r"importance must lie in \[1, 10\]"):
        store.add(e, [5, 11, 3], 0.0, "a", "obs")
    with pytest.raises(ValueError, match="importance"):
        store.add(e, 0.5, 0.0, "a", "obs")
    with pytest.raises(ValueError, match=r"importance: expected a scalar or shape \[3\]"):
        store.add(e, [5, 5], 0.0, "a", "obs")
    with pytest.raises(ValueError, match="agent"):
        store.add(e, 5, 0.0, None, "obs")
    with pytest.raises(ValueError, match="meta"):
        store.add(e[:1], 5, 0.0, "a", "obs", meta={"x": object()})
    assert len(store) == 0  # nothing half-written
    store.add(e, 5, 0.0, "a", "obs")
    with pytest.raises(ValueError, match="k: expected k >= 1"):
        store.retrieve(e, 0, 0.0)
    with pytest.raises(ValueError, match="unknown filter key"):
        store.retrieve(e, 3, 0.0, location="kitchen")
    with pytest.raises(ValueError, match="queries"):
        store.retrieve(_unit(rng, 1, 5), 3, 0.0)
    with pytest.raises(ValueError, match="weights"):
        store.retrieve(e, 3, 0.0, weights=(1, -1, 1))
    with pytest.raises(ValueError, match="now"):
        store.retrieve(e, 3, float("nan"))
    with pytest.raises(ValueError, match="forget"):
        store.forget()
    with pytest.raises(TypeError, match="unknown MemoryConfig field"):
        MemoryStore.open(tmp_path / "x.db", dim=D, efx=3)


def test_dim_mismatch_and_newer_schema(tmp_path):
    path = tmp_path / "m.db"
    MemoryStore.open(path, dim=D).close()
    with pytest.raises(SchemaError, match="dim=48"):
        MemoryStore.open(path, dim=D + 1)
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version=99")
    con.commit()
    con.close()
    with pytest.raises(SchemaError, match="schema version 99 is newer"):
        MemoryStore.open(path, dim=D)


def test_closed_store_refuses(tmp_path):
    s = MemoryStore.open(tmp_path / "m.db", dim=D)
    s.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.retrieve(np.ones((1, D)), 1, 0.0)


def test_config_validation():
    with pytest.raises(ValueError, match="synchronous"):
        MemoryConfig(synchronous="SOMETIMES")
    with pytest.raises(ValueError, match="dim"):
        MemoryConfig(dim=0)


def test_torch_backend_store_agrees(tmp_path):
    rng = np.random.default_rng(12)
    emb = _unit(rng, 700)
    args = (emb, rng.integers(1, 11, 700), rng.uniform(0, NOW, 700), "a", "obs")
    q = _unit(rng, 4)
    out = []
    for be in ("cpu", "torch"):
        with MemoryStore.open(tmp_path / f"{be}.db", dim=D, exact_below=32, backend=be) as s:
            s.add(*args)
            out.append(s.retrieve(q, 10, NOW, touch=False))
    for (a, sa), (b, sb) in zip(*out):
        assert a.tolist() == b.tolist()
        np.testing.assert_allclose(sa, sb, atol=1e-5)
