"""Cached synthetic memory stores for the memory benchmarks (built once, reused).

``python bench/memory_data.py clustered:20000 unstructured:1000000 ...`` builds the named stores
under ``METACOG_BENCH_MEMORY_DIR`` (default ``/tmp/metacog_memory_bench``); benchmarks call
:func:`open_store`, which builds a missing store and reopens an existing one. A store counts as
built only once its ``.build.json`` (written atomically after the final flush) exists; a partial
build is deleted and restarted.
"""
from __future__ import annotations

import json
import os
import sys
import time

from metacog_fast._atomic import atomic_write_bytes
from metacog_fast.memory import MemoryStore
from metacog_fast.memory.synthetic import SyntheticSpec, batches

DEFAULT_DIR = "/tmp/metacog_memory_bench"


def folder() -> str:
    d = os.environ.get("METACOG_BENCH_MEMORY_DIR", DEFAULT_DIR)
    os.makedirs(d, exist_ok=True)
    return d


def store_path(data: str, n: int) -> str:
    return os.path.join(folder(), f"{data}_{n}.db")


def open_store(data: str, n: int, **overrides) -> tuple[MemoryStore, dict]:
    """(store, build facts) for ``n`` records of ``data`` (see metacog_fast.memory.synthetic)."""
    spec = SyntheticSpec(data=data)
    path = store_path(data, n)
    facts_path = path + ".build.json"
    if os.path.exists(facts_path):
        with open(facts_path) as f:
            facts = json.load(f)
        return MemoryStore.open(path, dim=spec.dim, **overrides), facts
    for suffix in ("", "-wal", "-shm", ".hnsw", ".hnsw.json"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    st = MemoryStore.open(path, dim=spec.dim, save_every=0, synchronous="NORMAL", **overrides)
    t0 = time.perf_counter()
    for b in batches(spec, n):
        st.add(b.embeddings, b.importance, b.created, b.agent, b.kind)
    add_s = time.perf_counter() - t0
    st.flush()
    facts = {"data": data, "n": n, "add_s": add_s, "records_per_s": n / add_s,
             "built_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    atomic_write_bytes(facts_path, json.dumps(facts).encode())
    return st, facts


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        data, n = arg.split(":")
        t = time.perf_counter()
        st, facts = open_store(data, int(n))
        st.close()
        print(f"{arg}: {facts} ({time.perf_counter() - t:.1f} s)", flush=True)
