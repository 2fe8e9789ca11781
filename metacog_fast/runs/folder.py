"""A run folder on the driver: the configuration snapshot, one JSON record per finished episode,
and side files (memory stores, fitted models) that tasks hand back.

A record's key is its path relative to the folder without ``.json`` (``episodes/<game>/test_0``).
A record exists exactly when its episode finished: it is written by one atomic rename, so a
kill leaves either the whole record or none.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from metacog_fast._atomic import atomic_write_bytes
from metacog_fast.runs.records import read_json, write_json_atomic


def config_differences(old: Mapping[str, Any], new: Mapping[str, Any], ignore: Iterable[str] = (),
                       prefix: str = "") -> list[str]:
    """Dotted names of the fields whose values differ (nested dicts compared field by field);
    names in ``ignore`` (top level, or dotted) are left out. A field the old snapshot lacks and the new
    configuration sets to None is no difference: it is an option added later, at its off default."""
    skip = set(ignore)
    out: list[str] = []
    for k in sorted(set(old) | set(new), key=str):
        name = f"{prefix}{k}"
        if name in skip:
            continue
        a, b = old.get(k, _MISSING), new.get(k, _MISSING)
        if a is _MISSING and b is None:
            continue
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += config_differences(a, b, skip, prefix=f"{name}.")
        elif a != b:
            out.append(name)
    return out


_MISSING = object()


class RunFolderMismatch(ValueError):
    """A run folder holds a snapshot of another configuration (or of other models): resuming into it
    would mix two runs. The command line's folder is the one to change (``metacog`` exits 2)."""


def identity_differences(was: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """None when two identities (role -> what its name stands for) are equal, else a message naming
    the roles that changed with both values."""
    changed = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))
    if not changed:
        return None
    return (f"what {', '.join(changed)} stands for changed since it was played (was "
            f"{[was.get(k) for k in changed]}, now {[now.get(k) for k in changed]})")


class RunFolder:
    """One run's folder. ``config`` is the JSON-able configuration (None: a folder whose sub-runs
    keep their own snapshots); opening a folder that holds
    a snapshot whose fields differ (other than ``ignore``: fields that do not change results, such
    as the worker count) raises ValueError naming the fields. ``extra`` goes into the snapshot when
    the folder is created (a resumed folder keeps its own). ``identity``: what the configuration's
    names stand for (e.g. the hashes of the models behind ``finetuned:alfworld``); stored when the
    folder is created and, when a resumed folder has one, required to be equal, so that episodes of
    two different models never end up in one run. A folder written before identities were recorded
    resumes unchecked."""

    def __init__(self, path: str | os.PathLike, config: Mapping[str, Any] | None, *, ignore: Iterable[str] = (),
                 extra: Mapping[str, Any] | None = None, snapshot: str = "config.json",
                 identity: Mapping[str, Any] | None = None) -> None:
        self.root = Path(path)
        self.snapshot_path = self.root / snapshot
        self.ignore = tuple(ignore)
        self.root.mkdir(parents=True, exist_ok=True)
        if config is None:  # a folder of sub-runs, each with its own snapshot
            self.config: dict[str, Any] | None = None
            return
        self.config = json.loads(json.dumps(dict(config)))  # as it reads back (tuples become lists)
        previous = self.read_snapshot()
        if previous is not None:
            # a snapshot written before the harness holds the configuration itself at the top level
            old = previous.get("config", previous)
            if not isinstance(old, Mapping):
                raise ValueError(f"{self.snapshot_path}: expected a JSON object with a 'config' field")
            diff = config_differences(old, self.config, self.ignore)
            if diff:
                hint = ""
                if self.holds_only_snapshot():
                    hint = (f"; it holds no episode yet, so if no other process runs into it, delete "
                            f"{self.snapshot_path} to start over with the new configuration")
                raise RunFolderMismatch(f"{self.snapshot_path}: the run folder holds a different configuration "
                                 f"(fields {diff}); use another folder, or the same configuration to resume{hint}")
            if "config" not in previous:
                previous = {}
        self.identity = json.loads(json.dumps(dict(identity))) if identity is not None else None
        if previous and self.identity is not None and previous.get("identity") is not None:
            diff = identity_differences(previous["identity"], self.identity)
            if diff:
                raise RunFolderMismatch(f"{self.snapshot_path}: {diff}; use another folder")
        new = {"identity": self.identity} if self.identity is not None and not previous else {}
        doc = {**(extra or {}), **new, **(previous or {}), "config": self.config}  # extra: set when created
        write_json_atomic(self.snapshot_path, doc)

    def holds_only_snapshot(self) -> bool:
        """Whether the folder holds no file but its snapshot (nothing was recorded under it)."""
        return all(p == self.snapshot_path or p.is_dir() for p in self.root.rglob("*"))

    def read_snapshot(self) -> dict[str, Any] | None:
        return read_json(self.snapshot_path) if self.snapshot_path.exists() else None

    # -- records -----------------------------------------------------------------------------
    def record_path(self, key: str) -> Path:
        if not key or key.startswith(("/", ".")) or ".." in Path(key).parts:
            raise ValueError(f"key: expected a relative record key like 'episodes/<game>/test_0', got {key!r}")
        return self.root / f"{key}.json"

    def has(self, key: str) -> bool:
        return self.record_path(key).exists()

    def read(self, key: str) -> Any:
        return read_json(self.record_path(key))

    def write(self, key: str, record: Any) -> bool:
        """Write a finished episode's record; False (and nothing written) when it exists already:
        an episode is never counted twice."""
        p = self.record_path(key)
        if p.exists():
            return False
        write_json_atomic(p, record)
        return True

    def finished(self, keys: Iterable[str]) -> dict[str, Any]:
        """The records among ``keys`` that exist, by key."""
        return {k: self.read(k) for k in keys if self.has(k)}

    # -- side files --------------------------------------------------------------------------
    def side_path(self, relpath: str) -> Path:
        p = Path(relpath)
        if p.is_absolute() or ".." in p.parts or not p.parts:
            raise ValueError(f"path: expected a path inside the run folder, got {relpath!r}")
        return self.root / p

    def write_side_file(self, relpath: str, data: bytes) -> None:
        atomic_write_bytes(self.side_path(relpath), data)

    def read_side_files(self, relpaths: Iterable[str]) -> dict[str, bytes]:
        """Files (or every file under folders) at ``relpaths``; missing ones are left out."""
        out: dict[str, bytes] = {}
        for rel in relpaths:
            p = self.side_path(rel)
            if p.is_file():
                out[rel] = p.read_bytes()
            elif p.is_dir():
                for f in sorted(p.rglob("*")):
                    if f.is_file() and not f.name.startswith("."):
                        out[f.relative_to(self.root).as_posix()] = f.read_bytes()
        return out
