"""SQLite persistence of memory records (the source of truth).

WAL journal; the schema version lives in ``PRAGMA user_version``. The ``meta``
table holds ``dim``, ``seq`` (bumped in the same transaction as every add or
forget: the index sidecar must carry the same number to be trusted) and
``forget_seq`` (the seq of the last forget: after it, the index can only be
caught up by rebuilding).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
from typing import Any, Callable, Iterable, Iterator, TypeVar

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


class DamagedStoreError(RuntimeError):
    """The SQLite file of a memory store is damaged (SQLite reported a malformed or foreign file)."""

    def __init__(self, path: str, cause: BaseException) -> None:
        self.path = path
        super().__init__(
            f"{path}: the memory store's SQLite file is damaged ({cause}). What you can do: "
            f"(1) restore it from a copy made with MemoryStore.backup() and move the index files "
            f"{path}.hnsw and {path}.hnsw.json aside (they are rebuilt from the copy on open); "
            f"(2) or salvage the readable records: `sqlite3 {path} .recover | sqlite3 {path}.recovered`, "
            f"then open {path}.recovered (the index files {path}.hnsw* are derived and are rebuilt on open); "
            f"(3) or move the file aside to start an empty store. The damaged file was not modified.")


# SQLite's words for a file that is not (or no longer) a readable database; other errors
# (locked, read-only, disk full) are reported as they are.
_DAMAGE = ("malformed", "not a database", "corrupt", "file is encrypted")

F = TypeVar("F", bound=Callable[..., Any])


def is_damage(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.DatabaseError) and any(w in str(exc).lower() for w in _DAMAGE)


def _guarded(fn: F) -> F:
    """Turn SQLite's damage errors raised by a Database method into :class:`DamagedStoreError`."""

    @functools.wraps(fn)
    def wrapper(self: "Database", *a: Any, **kw: Any) -> Any:
        try:
            return fn(self, *a, **kw)
        except sqlite3.DatabaseError as exc:
            if is_damage(exc):
                raise DamagedStoreError(self.path, exc) from exc
            raise

    return wrapper  # type: ignore[return-value]


class Database:
    """Thin wrapper over one sqlite3 connection; callers serialise access."""

    def __init__(self, path: str, dim: int, synchronous: str = "FULL") -> None:
        self.path = path
        try:
            self._open(path, dim, synchronous)
        except sqlite3.DatabaseError as exc:
            with contextlib.suppress(Exception):
                self.conn.close()
            if is_damage(exc):
                raise DamagedStoreError(path, exc) from exc
            raise

    def _open(self, path: str, dim: int, synchronous: str) -> None:
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

    @_guarded
    def meta(self, key: str) -> str:
        row = self.conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if row is None:
            raise SchemaError(f"meta table lacks {key!r}: the database is damaged")
        return row[0]

    def seq(self) -> tuple[int, int]:
        """(seq, forget_seq)."""
        return int(self.meta("seq")), int(self.meta("forget_seq"))

    @_guarded
    def insert(self, rows: list[tuple[Any, ...]],
               pending_access: Iterable[tuple[float, int]]) -> tuple[np.ndarray, int]:
        """Insert records (agent, kind, text, location, created, last_access, importance,
        embedding bytes, meta json) in one transaction, with pending last_access updates;
        returns (the new ids [N], the seq of this transaction) once committed."""
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
            seq = self._bump_seq()
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return ids, seq

    def _bump_seq(self) -> int:
        """Add one to ``seq`` inside the open transaction; returns the new value."""
        self.conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key='seq'")
        return int(self.conn.execute("SELECT value FROM meta WHERE key='seq'").fetchone()[0])

    @_guarded
    def delete(self, ids: np.ndarray) -> int:
        """Delete records ``ids`` in one transaction; returns its seq (also the new ``forget_seq``)."""
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            c.executemany("DELETE FROM records WHERE id=?", ((int(i),) for i in ids))
            seq = self._bump_seq()
            c.execute("UPDATE meta SET value = ? WHERE key='forget_seq'", (str(seq),))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        return seq

    @_guarded
    def select_ids(self, where: str, args: tuple[Any, ...]) -> np.ndarray:
        cur = self.conn.execute(f"SELECT id FROM records WHERE {where}", args)
        return np.fromiter((r[0] for r in cur), np.int64)

    @_guarded
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

    @_guarded
    def write_access(self, pending: Iterable[tuple[float, int]]) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            self._write_access(pending)
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise

    @_guarded
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
        try:
            cur = self.conn.execute(
                "SELECT id, agent, kind, created, last_access, importance, embedding FROM records WHERE id > ? "
                "ORDER BY id", (after_id,))
            while True:
                rows = cur.fetchmany(batch)
                if not rows:
                    return
                yield rows
        except sqlite3.DatabaseError as exc:
            if is_damage(exc):
                raise DamagedStoreError(self.path, exc) from exc
            raise

    @_guarded
    def backup(self, target: str) -> int:
        """Copy the database to ``target`` with SQLite's online backup API, through a connection of
        its own, in one step: one read snapshot, so writers on the store's connection go on (WAL)
        and the copy is consistent. Written to a temp file, fsynced, then renamed over ``target``.
        Returns the number of records in the copy."""
        tmp = f"{target}.tmp-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        src = sqlite3.connect(self.path, isolation_level=None)
        try:
            dst = sqlite3.connect(tmp, isolation_level=None)
            try:
                src.backup(dst, pages=-1)
                dst.execute("PRAGMA journal_mode=DELETE")  # a single self-contained file
                n = int(dst.execute("SELECT COUNT(*) FROM records").fetchone()[0])
            finally:
                dst.close()
        finally:
            src.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
        fd = os.open(os.path.dirname(os.path.abspath(target)) or ".", os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return n

    def close(self) -> None:
        self.conn.close()


def dumps_meta(meta: Any, where: str) -> str | None:
    if meta is None:
        return None
    try:
        return json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: expected JSON-serialisable fields, {exc}") from None
