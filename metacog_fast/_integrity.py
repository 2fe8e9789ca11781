"""Checking a file the package loads against the size and sha256 its manifest records, before use.

:func:`verify_file` compares the size first (a truncated or grown file costs one ``stat``), then the
sha256. Hashing a 100 MB GGUF takes a few tenths of a second, so callers that load large files may
pass ``cache_dir``: a verified digest is then remembered in a small JSON sidecar per file, keyed by
the file's (absolute path, device, inode, size, mtime_ns, ctime_ns), and reused while all six are
unchanged. What that cache can and cannot catch:

- caught: a replaced file (new inode, or new size/mtime/ctime), a truncated or grown file, and any
  damage written in place through the file system, even one whose mtime was set back with
  ``os.utime``/``touch -d``: every write and every ``utime`` sets ctime to the current time, and no
  call sets ctime back;
- a digest is recorded only for a file whose ctime is at least :data:`RACY_SECONDS` older than the
  moment hashing began, and only when its stat is the same before and after hashing, so a write in
  the same timestamp tick as the verification (coarse file-system clocks) is never hidden;
- not caught: changes that bypass the kernel's timestamps (media bit rot, writes to the raw block
  device, a file system restored with its ctimes, the system clock set back before a write).
  ``$METACOG_VERIFY_CACHE=0`` turns the cache off: every load hashes.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import time
from pathlib import Path

from metacog_fast._atomic import atomic_write_bytes

CACHE_ENV = "METACOG_VERIFY_CACHE"
RACY_SECONDS = 2.0
"""A file changed less than this long before it was hashed is verified but not cached."""


def verify_cache_dir() -> Path:
    """Where verified digests are remembered, one small JSON per file: ``.verified`` under
    ``$METACOG_MODELS_HOME`` or ``~/.cache/metacog_fast/models`` (the folder of
    :func:`metacog_fast.llm.models.user_models_dir`)."""
    home = os.environ.get("METACOG_MODELS_HOME") or Path.home() / ".cache" / "metacog_fast" / "models"
    return Path(home) / ".verified"


class ModelFileError(ValueError):
    """A file the package was about to load does not match its manifest (damaged, truncated or
    replaced). The message names the file, the manifest and the expected size/sha256, and what to do."""


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of the file at ``path``, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _cache_file(cache_dir: Path, path: str) -> Path:
    return cache_dir / (hashlib.sha256(path.encode()).hexdigest()[:32] + ".json")


_MEMO: dict[tuple[str, tuple[int, ...]], str] = {}


def file_digest(path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """sha256 of ``path``, reused from this process's memo or from ``cache_dir``'s sidecar while the
    file's (path, dev, inode, size, mtime_ns, ctime_ns) is unchanged (see the module docstring)."""
    p = os.path.abspath(path)
    st = os.stat(p)
    stamp = _stamp(st)
    use_cache = os.environ.get(CACHE_ENV, "1").strip() not in ("0", "false", "no", "off")
    key = (p, tuple(stamp))
    if use_cache and key in _MEMO:
        return _MEMO[key]
    side = _cache_file(Path(cache_dir), p) if cache_dir is not None and use_cache else None
    if side is not None:
        try:
            doc = json.loads(side.read_text())
            if doc.get("path") == p and doc.get("stat") == stamp and isinstance(doc.get("sha256"), str):
                _MEMO[key] = doc["sha256"]
                return doc["sha256"]
        except (OSError, ValueError):
            pass  # no sidecar, or an unreadable one: hash
    began = time.time_ns()
    digest = sha256_file(p)
    settled = _stamp(os.stat(p)) == stamp and st.st_ctime_ns < began - int(RACY_SECONDS * 1e9)
    if use_cache and settled:
        _MEMO[key] = digest
        if side is not None:
            try:
                atomic_write_bytes(side, json.dumps({"path": p, "stat": stamp, "sha256": digest}).encode())
            except OSError:
                pass  # a read-only cache: hash again next time
    return digest


def verify_file(path: str | os.PathLike, *, sha256: str | None, size: int | None, manifest: str,
                remedy: str, cache_dir: str | os.PathLike | None = None) -> str:
    """``path`` made absolute, after checking its size and sha256 against ``manifest``'s record
    (``size``/``sha256``; None: that one is not recorded). Raises :class:`ModelFileError` naming the
    file, the manifest, what it records and ``remedy`` (what to do); FileNotFoundError if missing."""
    p = os.path.abspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"{p}: file not found (named by {manifest}); {remedy}")
    if size is not None:
        have = os.path.getsize(p)
        if have != int(size):
            raise ModelFileError(f"{p}: {have} bytes, but {manifest} records {int(size)} bytes and sha256 "
                                 f"{sha256 or '(none)'} (truncated, damaged or replaced file); {remedy}")
    if sha256 is not None:
        have_digest = file_digest(p, cache_dir)
        if have_digest != sha256:
            raise ModelFileError(f"{p}: sha256 {have_digest}, but {manifest} records sha256 {sha256} "
                                 f"({size if size is not None else 'unrecorded'} bytes) (damaged or "
                                 f"replaced file); {remedy}")
    return p


def verify_installed_files(dist_name: str, paths: list[str | os.PathLike]) -> None:
    """Check each of ``paths`` (files of the installed distribution ``dist_name``) against the size
    and sha256 the distribution's RECORD lists for it; ModelFileError naming the file and the
    reinstall command when one differs. A path the RECORD does not list is left unchecked."""
    dist = importlib.metadata.distribution(dist_name)
    want = {os.path.abspath(str(p)) for p in paths}
    manifest = f"the RECORD of the installed {dist_name} {dist.version} package"
    remedy = f"reinstall it: pip install --force-reinstall {dist_name}"
    for f in dist.files or ():
        path = os.path.abspath(str(f.locate()))
        if path not in want or f.hash is None or f.hash.mode != "sha256":
            continue
        digest = base64.urlsafe_b64decode(f.hash.value + "=" * (-len(f.hash.value) % 4)).hex()
        verify_file(path, sha256=digest, size=f.size, manifest=manifest, remedy=remedy, cache_dir=verify_cache_dir())
