"""Atomic JSON files (temp file + fsync + os.replace) and episode-record paths."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from metacog_fast._atomic import atomic_open


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically; returns the path."""
    with atomic_open(path, "w") as f:
        json.dump(obj, f, indent=1)
    return Path(path)


def read_json(path: str | os.PathLike) -> Any:
    """Read JSON, naming the file in the error when it is malformed."""
    p = Path(path)
    try:
        with open(p) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: malformed JSON ({e})") from e
