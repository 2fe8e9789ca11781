"""JSON files of a run: written atomically (temp file + fsync + os.replace), read with an error
that names the file. Every family's records, snapshots and summaries go through these two."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from metacog_fast._atomic import atomic_open


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 1,
                      default: Callable[[Any], Any] | None = None) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically; ``default`` converts what json cannot
    (as in ``json.dump``). Returns the path."""
    with atomic_open(path, "w") as f:
        json.dump(obj, f, indent=indent, default=default)
    return Path(path)


def read_json(path: str | os.PathLike) -> Any:
    """Read JSON, naming the file in the error when it is malformed."""
    p = Path(path)
    try:
        with open(p, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: malformed JSON ({e})") from e
