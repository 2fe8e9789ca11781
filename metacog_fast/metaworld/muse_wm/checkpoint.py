"""What acting needs from a training checkpoint (``<stem>.safetensors`` + ``<stem>.json`` written by
metacog_fast.metaworld.train.checkpoint), read without building the model or the training config."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from metacog_fast.metaworld.muse_wm.config import ActConfig


@dataclass
class ActingCheckpoint:
    """The acting half of a checkpoint."""

    weights: dict[str, np.ndarray]
    """RSSM + actor + self-assessment weights with the docs/design.md §1.1 names."""
    encoder: dict[str, np.ndarray]
    """The observation encoder's state_dict."""
    act: ActConfig
    """The acting config the run saved (``config.act``)."""
    classes: int
    """Classes per categorical group C (``config.model.C``)."""


def _doc(stem: str | os.PathLike) -> dict[str, Any]:
    jp = Path(stem).with_suffix(".json")
    if not jp.exists():
        raise ValueError(f"checkpoint: {jp} does not exist (expected <stem>.json beside <stem>.safetensors)")
    try:
        doc = json.loads(jp.read_text())
        cfg = doc["config"]
        cfg["act"], cfg["model"]["C"]  # noqa: B018 - both are required
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"checkpoint: {jp} is not a valid checkpoint JSON ({exc})") from exc
    return doc


def load_acting_weights(stem: str | os.PathLike) -> ActingCheckpoint:
    """Weights, encoder, acting config and C of the checkpoint at ``stem``, as numpy."""
    from safetensors.numpy import load_file

    cfg = _doc(stem)["config"]
    known = {f.name for f in fields(ActConfig)}
    act_d = cfg["act"]
    unknown = sorted(set(act_d) - known)
    if unknown:
        raise ValueError(f"checkpoint: config.act has unknown keys {unknown}")
    st_path = Path(stem).with_suffix(".safetensors")
    if not st_path.exists():
        raise ValueError(f"checkpoint: tensor file {st_path} is missing")
    tensors = load_file(str(st_path))
    w = {k[5:]: v for k, v in tensors.items() if k.startswith("rssm.")}
    enc = {k[8:]: v for k, v in tensors.items() if k.startswith("encoder.")}
    if not w or not enc:
        raise ValueError(f"checkpoint {st_path}: expected 'rssm.*' and 'encoder.*' tensors")
    return ActingCheckpoint(weights=w, encoder=enc, act=ActConfig(**act_d), classes=int(cfg["model"]["C"]))
