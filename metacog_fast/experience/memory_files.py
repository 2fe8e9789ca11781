"""Experience memory on disk: read a JSON export or a memory store, describe it, and move it between
the two (``metacog memory show|export|import``)."""
from __future__ import annotations

import os

from metacog_fast.experience.memory import ExperienceMemory, open_store


def load_memory(source: str) -> ExperienceMemory:
    """The memory in ``source``: an exported ``.json`` file, else a memory store (``.db``)."""
    if not os.path.exists(source):
        raise FileNotFoundError(f"memory source not found: {source}")
    if source.endswith(".json"):
        mem = ExperienceMemory()
        mem.load_json(source, merge=False)
        return mem
    store = open_store(source)
    try:
        return ExperienceMemory.load(store)
    finally:
        store.close()


def describe_memory(mem: ExperienceMemory) -> str:
    """Readable text of every entry: strategic principles, SOPs with their status, dynamic tool notes."""
    lines = [f"sizes: {mem.sizes()}", "strategic:"]
    for s in mem.strategic:
        lines.append(f"  - {s.text()}  [uses {s.counts.uses}, ok {s.counts.successes}, fail {s.counts.failures}]")
    lines.append("procedural:")
    for p in mem.procedural.values():
        lines.append(f"  [{p.status}] {p.key}  [uses {p.counts.uses}, ok {p.counts.successes}, fail {p.counts.failures}]")
        lines.append("    " + p.text().replace("\n", "\n    "))
    lines.append("tool (dynamic):")
    for t in mem.tool.values():
        if t.dynamic:
            lines.append(f"  {t.key}: {t.dynamic}")
    return "\n".join(lines)


def export_memory(source: str, json_path: str) -> None:
    """Memory store (or JSON) ``source`` -> readable JSON ``json_path``."""
    load_memory(source).export_json(json_path)


def import_memory(json_path: str, db: str) -> int:
    """Merge the exported memory ``json_path`` into the store ``db`` (created if absent); returns
    the number of entries the store then holds."""
    if not os.path.exists(json_path):
        raise FileNotFoundError(f"memory export not found: {json_path}")
    mem = ExperienceMemory()
    mem.load_json(json_path, merge=False)
    store = open_store(db)
    try:
        old = ExperienceMemory.load(store)
        old.load_json(mem.to_json(), merge=True)
        return old.save(store)
    finally:
        store.close()
