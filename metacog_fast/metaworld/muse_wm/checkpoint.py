"""What acting needs from a training checkpoint (``<stem>.safetensors`` + ``<stem>.json`` written by
metacog_fast.metaworld.train.checkpoint) or from a learning run's folder (its ``ckpt/latest``), read
without building the model or the training config."""
from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from metacog_fast._integrity import ModelFileError, verify_file
from metacog_fast.metaworld.muse_wm.config import ActConfig


@dataclass
class ActingCheckpoint:
    """The acting half of a checkpoint."""

    weights: dict[str, np.ndarray]
    """RSSM + actor + self-assessment weights with the docs/design.md §1.1 names."""
    encoder: dict[str, np.ndarray]
    """The observation encoder's state_dict."""
    act: ActConfig
    """The acting config the run saved (``config.act``); a learning run saves none: Dreamer-v3
    (``self_regulation=False``) unless its model trained the self-assessment head (``model.muse``)."""
    classes: int
    """Classes per categorical group C (``config.model.C``)."""


def resolve_checkpoint(source: str | os.PathLike) -> Path:
    """The checkpoint stem of ``source``: a learning run's folder (its ``ckpt/latest``), or a
    checkpoint given as its stem, its ``.json`` or its ``.safetensors``."""
    p = Path(source)
    if p.is_dir():
        latest = p / "ckpt" / "latest"
        if latest.with_suffix(".json").exists():
            return latest
        raise ValueError(f"source: {p} is a folder without ckpt/latest.json (expected a `metacog train learn` run "
                         "folder or a checkpoint stem)")
    if p.suffix in (".json", ".safetensors"):
        p = p.with_suffix("")
    return p


def _doc(stem: str | os.PathLike) -> dict[str, Any]:
    jp = Path(stem).with_suffix(".json")
    if not jp.exists():
        raise ValueError(f"checkpoint: {jp} does not exist (expected <stem>.json beside <stem>.safetensors)")
    try:
        doc = json.loads(jp.read_text())
        cfg = doc["config"]
        cfg["model"]["C"]  # noqa: B018 - required
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"checkpoint: {jp} is not a valid checkpoint JSON ({exc})") from exc
    return doc


def checked_tensor_file(stem: str | os.PathLike, doc: dict[str, Any]) -> Path:
    """The tensor file that the checkpoint JSON ``doc`` names beside ``stem`` (default
    ``stem.safetensors``), checked against the size and sha256 the JSON records before anything reads
    it. ValueError when it is missing; ModelFileError (a ValueError) when it does not match (damaged,
    replaced or partially written); a RuntimeWarning when the JSON records no digest (nothing to check)."""
    jp = Path(stem).with_suffix(".json")
    st_path = Path(stem).parent / str(doc.get("tensors") or Path(stem).with_suffix(".safetensors").name)
    if not st_path.exists():
        raise ValueError(f"checkpoint: tensor file {st_path} is missing")
    want, size = doc.get("sha256"), doc.get("bytes")
    if not want:
        warnings.warn(f"checkpoint: {jp} records no sha256 for {st_path}, so damage to it cannot be detected",
                      RuntimeWarning, stacklevel=3)
        return st_path
    todo = "restore the checkpoint (both files) from a copy, or train again"
    try:
        verify_file(st_path, sha256=want, size=size, manifest=f"its JSON {jp}", remedy=todo)
    except ModelFileError as exc:
        raise ModelFileError(f"checkpoint: {st_path} does not match the digest in its JSON {jp}: {exc}") from None
    return st_path


def load_acting_weights(stem: str | os.PathLike) -> ActingCheckpoint:
    """Weights, encoder, acting config and C of the checkpoint at ``stem`` (or of a learning run's
    folder: :func:`resolve_checkpoint`), as numpy (the tensor file checked against the JSON's digest
    first: :func:`checked_tensor_file`)."""
    from safetensors.numpy import load_file

    stem = resolve_checkpoint(stem)
    doc = _doc(stem)
    cfg = doc["config"]
    known = {f.name for f in fields(ActConfig)}
    act_d = cfg.get("act")
    if act_d is not None:
        unknown = sorted(set(act_d) - known)
        if unknown:
            raise ValueError(f"checkpoint: config.act has unknown keys {unknown}")
    st_path = checked_tensor_file(stem, doc)
    tensors = load_file(str(st_path))
    w = {k[5:]: v for k, v in tensors.items() if k.startswith("rssm.")}
    enc = {k[8:]: v for k, v in tensors.items() if k.startswith("encoder.")}
    if not w or not enc:
        raise ValueError(f"checkpoint {st_path}: expected 'rssm.*' and 'encoder.*' tensors")
    # a learning run saves no acting config: it acts as it was trained, MUSE only with a trained SA head
    act = ActConfig(**act_d) if act_d is not None else ActConfig(self_regulation=bool(cfg["model"].get("muse", False)))
    return ActingCheckpoint(weights=w, encoder=enc, act=act, classes=int(cfg["model"]["C"]))
