"""JSON persistence of the ScienceWorld modules: the run harness's atomic writer and reader
(``metacog_fast.runs.records``)."""
from __future__ import annotations

from typing import Any

from metacog_fast.runs.records import read_json, write_json_atomic


def write_json(path: str, obj: Any) -> None:
    """Write ``obj`` as JSON atomically (temp file + fsync + os.replace)."""
    write_json_atomic(path, obj)


__all__ = ["read_json", "write_json"]
