"""``metacog memory show|export|import``: experience memory between JSON exports and memory stores
(:mod:`metacog_fast.experience.memory_files`)."""
from __future__ import annotations

import argparse
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def _show(a: argparse.Namespace) -> int:
    from metacog_fast.experience.memory_files import describe_memory, load_memory

    print(describe_memory(_or_exit(load_memory, a.source)))
    return 0


def _export(a: argparse.Namespace) -> int:
    from metacog_fast.experience.memory_files import export_memory

    _or_exit(export_memory, a.db, a.json)
    print(f"wrote {a.json}")
    return 0


def _import(a: argparse.Namespace) -> int:
    from metacog_fast.experience.memory_files import import_memory

    n = _or_exit(import_memory, a.json, a.db)
    print(f"{a.db}: {n} entries")
    return 0


def _or_exit(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``; a missing file is a usage error (one line naming it, exit code 2, like every
    command's bad argument); a store that is open elsewhere or older than its index ends the command
    with its one-line explanation (exit code 1)."""
    import sys

    from metacog_fast.memory import StaleDatabaseError, StoreLockedError

    try:
        return fn(*args)
    except FileNotFoundError as e:
        print(f"metacog memory: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except (StoreLockedError, StaleDatabaseError) as e:
        raise SystemExit(f"metacog memory: error: {' '.join(str(e).split())}") from None


def attach(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog memory``."""
    sub = p.add_subparsers(dest="memory_cmd", required=True, metavar="{show,export,import}")
    s = sub.add_parser("show", help="print a memory (JSON file or memory store .db)")
    s.add_argument("source", help="exported memory .json or memory store .db")
    s.set_defaults(func=_show)
    e = sub.add_parser("export", help="memory store .db -> readable JSON")
    e.add_argument("db", help="memory store .db")
    e.add_argument("json", help="JSON file to write")
    e.set_defaults(func=_export)
    i = sub.add_parser("import", help="readable JSON -> memory store .db (merged into what is there)")
    i.add_argument("json", help="exported memory .json")
    i.add_argument("db", help="memory store .db (created if absent)")
    i.set_defaults(func=_import)
