"""SQLite persistence of memory records (the source of truth).

WAL journal; the schema version lives in ``PRAGMA user_version``. The ``meta``
table holds ``dim``, ``seq`` (bumped in the same transaction as every add or
forget: the index sidecar must carry the same number to be trusted) and
``forget_seq`` (the seq of the last forget: after it, the index can only be
caught up by rebuilding).
"""
from __future__ import annotations

import json
import sqlite3
from typing import Any, Iterable, Iterator

import numpy as np

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT,
    location TEXT,
    created REAL NOT NULL,
    last_access REAL NOT NULL,
    importance REAL NOT NULL,
    embedding BLOB NOT NULL,
    meta TEXT
);
CREATE INDEX IF NOT EXISTS records_agent_kind ON records (agent, kind, created);
"""

COLUMNS = ("id", "agent", "kind", "text", "location", "created", "last_access", "importance", "embedding", "meta")


class SchemaError(RuntimeError):
    """The database was written by an unknown (newer) schema version or for another embedding size."""


class Database:
    """Thin wrapper over one sqlite3 connection; callers serialise access."""

    def __init__(self, path: str, dim: int, synchronous: str = "FULL") -> None:
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        c = self.conn
        c.execute("PRAGMA journal_mode=WAL")
        c.execute(f"PRAGMA synchronous={synchronous.upper()}")
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            c.close()
            raise SchemaError(
                f"{path}: memory schema version {version} is newer than this metacog_fast supports "
                f"({SCHEMA_VERSION}); upgrade metacog_fast to open it"
            )
        c.execute("BEGIN IMMEDIATE")
        try:
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)
            if version == 0:
                c.execute("INSERT OR IGNORE INTO meta VALUES ('dim', ?)", (str(dim),))
                c.execute("INSERT OR IGNORE INTO meta VALUES ('seq', '0')")
                c.execute("INSERT OR IGNORE INTO meta VALUES ('forget_seq', '0')")
                c.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            c.close()
            raise
        stored = int(self.meta("dim"))
        if stored != dim:
            c.close()
            raise SchemaError(f"{path}: store holds dim={stored} embeddings, opened with dim={dim}")

    def meta(self, key: str) -> str:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if row is None:
            raise SchemaError(f"meta table lacks {key!r}: the database is damaged")
        return row[0]

    def seq(self) -> tuple[int, int]:
        """(seq, forget_seq)."""
        return int(self.meta("seq")), int(self.meta("forget_seq"))

    def insert(self, rows: list[tuple[Any, ...]], pending_access: Iterable[tuple[float, int]]) -> np.ndarray:
        """Insert records (agent, kind, text, location, created, last_access, importance,
        embedding bytes, meta json) in one transaction, with pending last_access updates;
        returns the new ids [N] once committed."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            self._write_access(pending_access)
            first = None
            ids = np.empty(len(rows), np.int64)
            for i, r in enumerate(rows):
                cur = c.execute(
                    "INSERT INTO records (agent, kind, text, location, created, last_access, importance, embedding, meta)"
                    " VALUES (?,?,?,?,?,?,?,?,?)", r)
                ids[i] = cur.lastrowid
                first = first if first is not None else cur.lastrowid
            c.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='seq'")
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return ids

    def delete(self, ids: np.ndarray) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            c.executemany("DELETE FROM records WHERE id=?", ((int(i),) for i in ids))
            c.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='seq'")
            c.execute("UPDATE meta SET value = (SELECT value FROM meta WHERE key='seq') WHERE key='forget_seq'")
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def select_ids(self, where: str, args: tuple[Any, ...]) -> np.ndarray:
        cur = self.conn.execute(f"SELECT id FROM records WHERE {where}", args)
        return np.fromiter((r[0] for r in cur), np.int64)

    def set_importance(self, ids: np.ndarray, values: np.ndarray) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            c.executemany("UPDATE records SET importance=? WHERE id=?",
                          ((float(v), int(i)) for i, v in zip(ids, values)))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def _write_access(self, pending: Iterable[tuple[float, int]]) -> None:
        self.conn.executemany("UPDATE records SET last_access=? WHERE id=?", pending)

    def write_access(self, pending: Iterable[tuple[float, int]]) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            self._write_access(pending)
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    def fetch(self, ids: np.ndarray) -> dict[int, tuple[Any, ...]]:
        out: dict[int, tuple[Any, ...]] = {}
        ids = [int(i) for i in ids]
        for s in range(0, len(ids), 500):
            chunk = ids[s: s + 500]
            q = f"SELECT {', '.join(COLUMNS)} FROM records WHERE id IN ({','.join('?' * len(chunk))})"
            for r in self.conn.execute(q, chunk):
                out[r[0]] = r
        return out

    def scan(self, after_id: int = 0, batch: int = 20_000) -> Iterator[list[tuple[Any, ...]]]:
        """All records with id > after_id in id order, in batches of
        (id, agent, kind, created, last_access, importance, embedding)."""
        cur = self.conn.execute(
            "SELECT id, agent, kind, created, last_access, importance, embedding FROM records WHERE id > ? ORDER BY id",
            (after_id,))
        while True:
            rows = cur.fetchmany(batch)
            if not rows:
                return
            yield rows

    def close(self) -> None:
        self.conn.close()


def dumps_meta(meta: Any, where: str) -> str | None:
    if meta is None:
        return None
    try:
        return json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: expected JSON-serialisable fields, {exc}") from None
