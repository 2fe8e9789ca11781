"""Input checks shared by the metrics: clear errors, never silent garbage."""
from __future__ import annotations

from typing import Any

import numpy as np


def as_vector(x: Any, name: str) -> np.ndarray:
    """A non-empty, finite float64 array (any shape, flattened to [N])."""
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: expected numbers, got {type(x).__name__} ({exc})") from None
    a = a.reshape(-1)
    if a.size == 0:
        raise ValueError(f"{name}: expected at least one value, got an empty input")
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return a


def as_binary(x: Any, name: str) -> np.ndarray:
    """A non-empty [N] array of 0/1 outcomes (bool or numbers equal to 0 or 1)."""
    a = as_vector(x, name)
    if not np.isin(a, (0.0, 1.0)).all():
        bad = a[~np.isin(a, (0.0, 1.0))][:3]
        raise ValueError(f"{name}: expected binary outcomes (0/1 or bool), got values such as {bad.tolist()}")
    return a.astype(np.int64)


def same_length(a: np.ndarray, b: np.ndarray, na: str, nb: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{nb}: expected {a.size} values to match {na}, got {b.size}")
