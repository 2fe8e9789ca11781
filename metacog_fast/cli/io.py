"""Small output helpers shared by the CLI commands."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from metacog_fast._atomic import atomic_open


def _default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Write ``data`` as JSON to ``path`` via a temp file in the same folder + ``os.replace``."""
    with atomic_open(path, "w") as f:
        json.dump(data, f, indent=2, default=_default, allow_nan=False)
        f.write("\n")
    return Path(path)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` via a temp file in the same folder + ``os.replace``."""
    with atomic_open(path, "w") as f:
        f.write(text)
    return Path(path)
