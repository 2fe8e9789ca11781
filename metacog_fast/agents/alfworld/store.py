"""Atomic JSON files (temp file + fsync + os.replace) and episode-record paths."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return p


def read_json(path: str | os.PathLike) -> Any:
    """Read JSON, naming the file in the error when it is malformed."""
    p = Path(path)
    try:
        with open(p) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: malformed JSON ({e})") from e
