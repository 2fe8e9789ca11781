"""The three memories together: merge/dedup, SOP demotion and retirement, JSON export/import,
and persistence in the package's memory store (SQLite + HNSW).

The store holds one record per entry (agent ``"experience"``, kind = memory name, text = the
entry's readable text, meta = the entry's JSON); :meth:`save` rewrites them, :meth:`load` reads
them back. The exported JSON is the same dicts, grouped by memory, with a format version.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
from typing import Any, Iterable

import numpy as np

from metacog_fast._atomic import atomic_open
from metacog_fast.experience import entries as en
from metacog_fast.experience.config import ExperienceConfig
from metacog_fast.experience.embed import DIM, Embedder, hashing_embedder
from metacog_fast.experience.tools import ENV_TOOLS

FORMAT = "metacog-experience-memory"
VERSION = 1
STORE_AGENT = "experience"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


class ExperienceMemory:
    """Strategic principles, SOPs (env -> skill) and tool entries (env -> action type)."""

    def __init__(self, config: ExperienceConfig | None = None, embedder: Embedder = hashing_embedder) -> None:
        self.config = config or ExperienceConfig()
        self.embed = embedder
        self.strategic: list[en.StrategicEntry] = []
        self.procedural: dict[str, en.SOP] = {}
        self.tool: dict[str, en.ToolEntry] = {}

    # ------------------------------------------------------------------ tools
    def ensure_tools(self, env: str) -> None:
        """Install the static tool descriptions of ``env`` (kept if already there)."""
        for action, desc in ENV_TOOLS[env].items():
            key = f"{env}/{action}"
            if key not in self.tool:
                self.tool[key] = en.ToolEntry(env=env, action=action, static=desc,
                                              provenance=en.Provenance(task="builtin", date=now_iso()))

    def tools(self, env: str) -> list[en.ToolEntry]:
        return [t for t in self.tool.values() if t.env == env]

    def set_dynamic(self, env: str, action: str, instruction: str, prov: en.Provenance) -> None:
        self.ensure_tools(env)
        t = self.tool.get(f"{env}/{action}")
        if t is None or not instruction:
            return
        if t.dynamic != instruction:
            t.dynamic = instruction
            t.provenance = prov

    def dynamic_instruction(self, env: str, action: str) -> str:
        t = self.tool.get(f"{env}/{action}")
        return t.dynamic if t is not None else ""

    # -------------------------------------------------------------- strategic
    def add_strategic(self, entry: en.StrategicEntry) -> en.StrategicEntry:
        """Add a principle; one whose dilemma is a near duplicate (cosine >= dedup_threshold) is merged
        into the existing one (counts summed, the newer strategy kept). Keeps at most ``max_strategic``."""
        if self.strategic:
            e = self.embed([entry.dilemma] + [s.dilemma for s in self.strategic])
            sims = e[1:] @ e[0]
            j = int(np.argmax(sims))
            if sims[j] >= self.config.dedup_threshold:
                old = self.strategic[j]
                old.counts.merge(entry.counts)
                old.strategy = entry.strategy
                old.provenance = entry.provenance
                return old
        self.strategic.append(entry)
        self._bound_strategic()
        return entry

    def _bound_strategic(self) -> None:
        cap = self.config.max_strategic
        if len(self.strategic) <= cap:
            return
        # Keep the most useful: success rate (Laplace-smoothed), then recency (list order).
        order = sorted(range(len(self.strategic)),
                       key=lambda i: (-(self.strategic[i].counts.successes + 1) / (self.strategic[i].counts.uses + 2), -i))
        keep = sorted(order[:cap])
        self.strategic = [self.strategic[i] for i in keep]

    # -------------------------------------------------------------- procedural
    def active_sops(self, env: str) -> list[en.SOP]:
        """SOPs shown in the index: active first, then demoted; retired never."""
        s = [p for p in self.procedural.values() if p.env == env and p.status != "retired"]
        return sorted(s, key=lambda p: (p.status != "active", p.skill))

    def add_sop(self, sop: en.SOP) -> en.SOP:
        """Add an SOP. Same env and skill (or a near-duplicate skill name): merged — the shorter
        successful step list wins, notes and preconditions are unioned, counts summed; a retired SOP
        replaced by a fresh success comes back as active."""
        existing = self.procedural.get(sop.key)
        if existing is None:
            same_env = [p for p in self.procedural.values() if p.env == sop.env]
            if same_env:
                e = self.embed([sop.skill] + [p.skill for p in same_env])
                sims = e[1:] @ e[0]
                j = int(np.argmax(sims))
                if sims[j] >= self.config.dedup_threshold:
                    existing = same_env[j]
        if existing is None:
            self.procedural[sop.key] = sop
            return sop
        if existing.status == "retired" or len(sop.steps) < len(existing.steps):
            existing.steps = list(sop.steps)
            existing.provenance = sop.provenance
            existing.status = "active"
        existing.preconditions = _union(existing.preconditions, sop.preconditions)
        existing.notes = _union(existing.notes, sop.notes)
        existing.counts.merge(sop.counts)
        return existing

    def find_sop(self, env: str, query: str) -> en.SOP | None:
        """The non-retired SOP of ``env`` whose skill is most similar to ``query`` (None if none)."""
        cands = self.active_sops(env)
        if not cands:
            return None
        e = self.embed([query] + [p.skill for p in cands])
        return cands[int(np.argmax(e[1:] @ e[0]))]

    def record_sop_outcome(self, sop: en.SOP, success: bool) -> str:
        """Count a use of ``sop`` and apply demotion / retirement. Returns the resulting status."""
        sop.counts.record(success)
        c, cfg = sop.counts, self.config
        if success and sop.status == "demoted" and c.successes >= c.failures:
            sop.status = "active"
        elif not success:
            if c.failures >= cfg.retire_after_failures and c.failures / c.uses >= cfg.retire_failure_rate:
                sop.status = "retired"
            elif c.failures >= cfg.demote_after_failures and c.failures > c.successes:
                sop.status = "demoted"
        return sop.status

    # ----------------------------------------------------------------- sizes
    def sizes(self) -> dict[str, int]:
        return {"strategic": len(self.strategic),
                "procedural": sum(p.status != "retired" for p in self.procedural.values()),
                "procedural_retired": sum(p.status == "retired" for p in self.procedural.values()),
                "tool_dynamic": sum(bool(t.dynamic) for t in self.tool.values())}

    # ------------------------------------------------------------ JSON export
    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "exported": now_iso(),
                "strategic": [en.to_dict(e) for e in self.strategic],
                "procedural": [en.to_dict(e) for e in self.procedural.values()],
                "tool": [en.to_dict(e) for e in self.tool.values()]}

    def export_json(self, path: str | os.PathLike[str]) -> None:
        """Write the memories as readable JSON, atomically (temp file + os.replace)."""
        atomic_write_text(path, json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")

    def load_json(self, data: Any, merge: bool = True) -> None:
        """Load exported memories (a dict or a JSON file path); ``merge=False`` replaces everything."""
        if isinstance(data, (str, os.PathLike)):
            try:
                with open(data, encoding="utf-8") as f:
                    data = json.load(f)
            except FileNotFoundError:
                raise FileNotFoundError(f"memory file not found: {os.fspath(data)}") from None
            except json.JSONDecodeError as e:
                raise ValueError(f"memory file {os.fspath(data)!s} is not valid JSON: {e}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not an exported experience memory: expected a JSON object with format={FORMAT!r}")
        if data.get("version") != VERSION:
            raise ValueError(f"memory format version must be {VERSION}, got {data.get('version')!r}")
        parsed = {k: [en.from_dict(k, d) for d in _list(data, k)] for k in en.KINDS}
        if not merge:
            self.strategic, self.procedural, self.tool = [], {}, {}
        for s in parsed["strategic"]:
            self.add_strategic(s)
        for p in parsed["procedural"]:
            if p.key in self.procedural or not merge:
                self.procedural[p.key] = p
            else:
                self.add_sop(p)
        for t in parsed["tool"]:
            self.tool[t.key] = t

    # ------------------------------------------------------- memory store sync
    def save(self, store: Any) -> int:
        """Rewrite this memory's records in a :class:`~metacog_fast.memory.MemoryStore`. Returns the count."""
        store.forget(agent=STORE_AGENT)
        items: list[tuple[str, Any, str]] = [("strategic", e, e.text()) for e in self.strategic]
        items += [("procedural", e, e.text()) for e in self.procedural.values()]
        items += [("tool", e, f"{e.action}: {e.static} {e.dynamic}".strip()) for e in self.tool.values()]
        if not items:
            return 0
        emb = self.embed([t for _, _, t in items])
        store.add(emb, importance=5.0, created=0.0, agent=STORE_AGENT, kind=[k for k, _, _ in items],
                  text=[t for _, _, t in items], meta=[en.to_dict(e) for _, e, _ in items])
        store.flush()
        return len(items)

    @classmethod
    def load(cls, store: Any, config: ExperienceConfig | None = None,
             embedder: Embedder = hashing_embedder) -> "ExperienceMemory":
        """Read the memories saved by :meth:`save` back from a store."""
        mem = cls(config, embedder)
        n = len(store)
        if n == 0:
            return mem
        q = np.zeros((1, DIM), dtype=np.float32)
        q[0, 0] = 1.0
        (ids, _), = store.retrieve(q, k=n, now=0.0, agent=STORE_AGENT, exact=True, touch=False)
        recs = sorted((r for r in store.get(ids) if r is not None), key=lambda r: r.id)
        for r in recs:
            e = en.from_dict(r.kind, r.meta)
            if r.kind == "strategic":
                mem.strategic.append(e)
            elif r.kind == "procedural":
                mem.procedural[e.key] = e
            else:
                mem.tool[e.key] = e
        return mem


def open_store(path: str | os.PathLike[str]) -> Any:
    """Open (or create) the memory store file used for experience memory."""
    from metacog_fast.memory import MemoryConfig, MemoryStore

    try:
        return MemoryStore.open(path, config=MemoryConfig(dim=DIM))
    except Exception:
        # No compiled core in this process: the store's readable torch path does the same maths.
        return MemoryStore.open(path, config=MemoryConfig(dim=DIM, backend="torch"))


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def _union(a: Iterable[str], b: Iterable[str]) -> list[str]:
    out: list[str] = []
    for x in list(a) + list(b):
        if x not in out:
            out.append(x)
    return out


def _list(data: dict, key: str) -> list:
    v = data.get(key, [])
    if not isinstance(v, list):
        raise ValueError(f"memory JSON field {key!r} must be a list, got {type(v).__name__}")
    return v
