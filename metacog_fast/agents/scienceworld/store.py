"""Atomic JSON persistence of episodes and run files."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` as JSON atomically (temp file + os.replace)."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_json(path: str) -> Any:
    """Read a JSON file; a clear error names the file when it is malformed."""
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: malformed JSON ({exc})") from exc


def episode_path(run: str, config: str, task: str, variation: int) -> str:
    return os.path.join(run, "episodes", config, f"{task}__{variation}.json")
