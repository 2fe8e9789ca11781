"""One writer per store: an exclusive ``flock`` on ``<db>.lock`` held from open to close.

``flock`` belongs to the open file, so a second open of the same store conflicts whether it comes
from another process or from this one, and the kernel releases the lock when its holder exits or
is killed (``kill -9`` included): a lock is never left stale. The file holds the holder's pid,
host, start time and command line (JSON), read back into :class:`StoreLockedError` for whoever is
refused. The file itself is never deleted (deleting a lock file races with a process opening it).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from typing import Any


class StoreLockedError(RuntimeError):
    """The store is open in another process (or by another ``MemoryStore`` in this process)."""

    def __init__(self, path: str, lock_path: str, holder: dict[str, Any] | None) -> None:
        self.path = path
        self.lock_path = lock_path
        self.holder = holder or {}
        super().__init__(f"{path}: the memory store is already open, {describe(self.holder)}; "
                         f"a store has one writer at a time (lock file {lock_path}). Close the other "
                         f"store first (a process that exits or is killed releases the lock), or give "
                         f"this process its own store path; to read the records meanwhile, let the "
                         f"holder copy them with MemoryStore.backup(path) and open the copy.")


def describe(holder: dict[str, Any]) -> str:
    """Who holds the lock, in words (from the lock file's JSON; empty: not recorded yet)."""
    if not holder.get("pid"):
        return "held by a process that has not recorded itself (it is opening or closing the store)"
    me = holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname()
    who = "this process" if me else "process"
    since = holder.get("since")
    when = f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}" if isinstance(since, (int, float)) else ""
    cmd = holder.get("cmd")
    cmd = f" ({cmd})" if cmd else ""
    extra = ": another MemoryStore on this path is still open here" if me else ""
    return f"held by {who} pid {holder['pid']} on host {holder.get('host', '?')}{when}{cmd}{extra}"


class StoreLock:
    """The exclusive lock of the store at ``path`` (file ``path + '.lock'``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock_path = path + ".lock"
        self._file = None

    def acquire(self) -> "StoreLock":
        """Take the lock without waiting; raises :class:`StoreLockedError` naming the holder."""
        try:
            f = open(self.lock_path, "a+", encoding="utf-8")
        except FileNotFoundError:
            folder = os.path.dirname(os.path.abspath(self.path))
            raise FileNotFoundError(f"{self.path}: folder {folder} does not exist (a memory store's files "
                                    f"are created in an existing folder)") from None
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(self.lock_path)
            f.close()
            raise StoreLockedError(self.path, self.lock_path, holder) from None
        except BaseException:
            f.close()
            raise
        try:
            f.seek(0)
            f.truncate()
            f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                                "cmd": " ".join(sys.argv)[:200]}))
            f.flush()
        except OSError:
            pass  # the holder's details are a courtesy; the flock is the lock
        self._file = f
        return self

    def release(self) -> None:
        """Clear the holder's details and unlock (idempotent)."""
        f, self._file = self._file, None
        if f is None:
            return
        with contextlib.suppress(OSError):
            f.seek(0)
            f.truncate()
            f.flush()
        with contextlib.suppress(OSError):
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        f.close()

    def forget_inherited(self) -> None:
        """In a forked child: close the inherited descriptor without unlocking or clearing the file
        (the lock belongs to the open file shared with the parent, which keeps it)."""
        f, self._file = self._file, None
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()


def read_holder(lock_path: str) -> dict[str, Any] | None:
    """The holder details in the lock file (None when empty or unreadable)."""
    try:
        with open(lock_path, encoding="utf-8") as f:
            data = json.loads(f.read() or "null")
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
