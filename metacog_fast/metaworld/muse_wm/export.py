"""Acting weights that ship: a training checkpoint or a learning run exported to a small folder
(``acting.safetensors`` in fp16 + ``model.json``), and that folder loaded back for acting.

A full checkpoint holds the world model's decoder and reward heads, the critic and the Adam moments
(45-49 MB); acting needs the RSSM, the actor, the self-assessment head and the encoder (2.3 M
parameters), 4.6 MB in fp16. ``model.json`` records what the folder is (format, precision, acting
config, C, parameter count), the tensor file's size and sha256 (checked before every load), where
it came from (the source checkpoint's JSON and tensor digests, env steps, updates) and, when given,
the success it measured.

    export_acting("runs/metaworld/learn/reach-v3/seed0", "models/reach", measured={...})
    agent = MuseWMAgent.from_pretrained("models/reach")
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from metacog_fast._atomic import atomic_tmp_path, atomic_write_bytes
from metacog_fast._integrity import sha256_file, verify_file
from metacog_fast.metaworld.muse_wm.checkpoint import ActingCheckpoint, load_acting_weights, resolve_checkpoint
from metacog_fast.metaworld.muse_wm.config import ActConfig

@dataclass
class ExportConfig:
    """``metacog train export``: a checkpoint's acting weights to a small folder that ships."""

    source: str = ""
    """A `metacog train learn` run folder (its latest checkpoint) or a checkpoint stem (`<stem>.json`)."""
    out: str = ""
    """Folder to write acting.safetensors and model.json into (created; an earlier export there is replaced)."""
    precision: str = "fp16"
    """Tensor precision: "fp16" (~5 MB, what ships) or "fp32"."""
    name: str | None = None
    """Name recorded in model.json (None: the folder's name)."""

    def validate(self) -> "ExportConfig":
        if not self.source:
            raise ValueError("source: expected a learning run folder or a checkpoint stem")
        if not self.out:
            raise ValueError("out: expected the folder to write the export into")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {PRECISIONS}, got {self.precision!r}")
        return self


FORMAT = "metacog_fast.muse_wm.acting/1"
TENSORS = "acting.safetensors"
PRECISIONS = ("fp16", "fp32")
_DTYPES = {"fp16": np.float16, "fp32": np.float32}
SHIPPED = Path(__file__).parent / "pretrained"
"""Acting folders shipped inside the package, one per name (``from_pretrained(name)``)."""


def check_source(source: str | os.PathLike) -> Path:
    """The checkpoint stem of ``source`` if its JSON exists, else ValueError saying what was expected
    (reads nothing else: cheap enough for a command line's checks)."""
    stem = resolve_checkpoint(source)
    if not stem.with_suffix(".json").exists():
        raise ValueError(f"source: no checkpoint at {stem} (expected {stem.with_suffix('.json')} beside its tensors, "
                         "or a `metacog train learn` run folder)")
    return stem


def export_acting(source: str | os.PathLike, out: str | os.PathLike, precision: str = "fp16",
                  measured: Mapping[str, Any] | None = None, name: str | None = None) -> Path:
    """Write ``out/acting.safetensors`` and ``out/model.json`` from the checkpoint at ``source``
    (:func:`resolve_checkpoint`; its tensors checked against their digest first). Returns the
    ``model.json`` path. ``measured``: what the weights achieved (e.g. a learning run's last
    evaluation), recorded as given. An existing folder is replaced only when it holds an export."""
    from safetensors.numpy import save_file

    if precision not in PRECISIONS:
        raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
    stem = check_source(source)
    ck = load_acting_weights(stem)
    dtype = _DTYPES[precision]
    tensors: dict[str, np.ndarray] = {}
    for prefix, group in (("rssm.", ck.weights), ("encoder.", ck.encoder)):
        for k, v in group.items():
            x = np.asarray(v, np.float32)
            if not np.isfinite(x).all():
                raise ValueError(f"source: tensor {prefix}{k} of {stem} holds NaN or Inf; nothing exported")
            if precision == "fp16" and np.abs(x).max(initial=0.0) > np.finfo(np.float16).max:
                raise ValueError(f"precision: tensor {prefix}{k} exceeds the fp16 range; export with precision='fp32'")
            tensors[prefix + k] = np.ascontiguousarray(x.astype(dtype))
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "model.json").exists():
        raise ValueError(f"out: {out} exists and is not an acting export (no model.json); pick another folder")
    out.mkdir(parents=True, exist_ok=True)
    st_path = out / TENSORS
    with atomic_tmp_path(st_path) as tmp:
        save_file(tensors, str(tmp), metadata={"format": FORMAT, "precision": precision})
    src_json = stem.with_suffix(".json")
    src_doc = json.loads(src_json.read_text())
    meta = src_doc.get("meta") or {}
    doc = {
        "format": FORMAT,
        "name": name or out.name,
        "precision": precision,
        "act": asdict(ck.act),
        "classes": ck.classes,
        "parameters": int(sum(v.size for v in tensors.values())),
        "tensors": TENSORS,
        "bytes": st_path.stat().st_size,
        "sha256": sha256_file(st_path),
        "source": {
            "checkpoint": str(stem),
            "json_sha256": hashlib.sha256(src_json.read_bytes()).hexdigest(),
            "tensors_sha256": src_doc.get("sha256"),
            "env_steps": meta.get("env_steps"),
            "updates": meta.get("updates"),
            "task": (src_doc.get("config") or {}).get("task"),
        },
        "measured": dict(measured) if measured is not None else None,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    return atomic_write_bytes(out / "model.json", (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())


def pretrained_names() -> list[str]:
    """Names of the acting folders shipped in the package."""
    if not SHIPPED.is_dir():
        return []
    return sorted(p.name for p in SHIPPED.iterdir() if (p / "model.json").is_file())


def resolve_pretrained(name_or_path: str | os.PathLike) -> Path:
    """The export folder of ``name_or_path``: a folder (or its ``model.json``) on disk, else a name
    shipped in the package (:func:`pretrained_names`)."""
    p = Path(name_or_path)
    if p.name == "model.json":
        p = p.parent
    if (p / "model.json").is_file():
        return p
    if isinstance(name_or_path, str) and name_or_path in pretrained_names():
        return SHIPPED / name_or_path
    shipped = pretrained_names()
    raise ValueError(f"name_or_path: {name_or_path!r} is neither a folder with model.json nor a shipped model "
                     f"(shipped: {', '.join(shipped) if shipped else 'none yet'}); write one with "
                     "`metacog train export SOURCE --out DIR`")


def load_pretrained(name_or_path: str | os.PathLike) -> tuple[ActingCheckpoint, dict[str, Any]]:
    """(acting weights as float32, the ``model.json`` document) of an export folder or shipped name;
    the tensor file is checked against the size and sha256 in ``model.json`` before it is read."""
    from safetensors.numpy import load_file

    folder = resolve_pretrained(name_or_path)
    mj = folder / "model.json"
    try:
        doc = json.loads(mj.read_text())
        fmt, act_d, classes = doc["format"], doc["act"], int(doc["classes"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"model.json: {mj} is not an acting export's manifest ({exc})") from None
    if not doc.get("sha256") or doc.get("bytes") is None:
        raise ValueError(f"model.json: {mj} records no sha256 and size for its tensors, so they cannot be checked")
    if fmt != FORMAT:
        raise ValueError(f"model.json: {mj} has format {fmt!r}; this package reads {FORMAT!r}")
    st_path = folder / str(doc.get("tensors", TENSORS))
    verify_file(st_path, sha256=doc.get("sha256"), size=doc.get("bytes"), manifest=str(mj),
                remedy="export it again (`metacog train export`) or restore the folder from a copy")
    tensors = load_file(str(st_path))
    w = {k[5:]: v.astype(np.float32) for k, v in tensors.items() if k.startswith("rssm.")}
    enc = {k[8:]: v.astype(np.float32) for k, v in tensors.items() if k.startswith("encoder.")}
    if not w or not enc:
        raise ValueError(f"model.json: {st_path} lacks 'rssm.*' or 'encoder.*' tensors")
    return ActingCheckpoint(weights=w, encoder=enc, act=ActConfig(**act_d), classes=classes), doc
