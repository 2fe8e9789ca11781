"""Atomic JSON persistence of episodes and run files."""
from __future__ import annotations

import json
import os
from typing import Any

from metacog_fast._atomic import atomic_open


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` as JSON atomically (temp file + os.replace)."""
    with atomic_open(path, "w") as f:
        json.dump(obj, f, indent=1)


def read_json(path: str) -> Any:
    """Read a JSON file; a clear error names the file when it is malformed."""
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: malformed JSON ({exc})") from exc


def episode_path(run: str, config: str, task: str, variation: int) -> str:
    return os.path.join(run, "episodes", config, f"{task}__{variation}.json")
