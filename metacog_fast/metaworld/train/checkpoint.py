"""Checkpoints: ``<stem>.safetensors`` (model tensors, docs/design.md names for the RSSM under ``rssm.``,
plus ``opt.*`` Adam state when saved for training) beside ``<stem>.json`` (the config and any
metadata). Both written atomically (temp file + os.replace); the JSON is written last so a
checkpoint is complete exactly when its JSON exists and names the tensor file's digest."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from metacog_fast._atomic import atomic_tmp_path, atomic_write_bytes
from metacog_fast.metaworld.models.dreamer import Dreamer
from metacog_fast.metaworld.muse_wm.checkpoint import checked_tensor_file
from metacog_fast.metaworld.train.config import ProtocolConfig


def _clean(o: Any) -> Any:
    """NaN/Inf -> None (strict JSON), numpy scalars/arrays -> Python."""
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, (float, np.floating)):
        return float(o) if np.isfinite(o) else None
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.ndarray):
        return _clean(o.tolist())
    return o


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """JSON written atomically; NaN becomes null."""
    text = json.dumps(_clean(obj), indent=2, sort_keys=True, allow_nan=False, default=_json_default)
    return atomic_write_bytes(path, (text + "\n").encode())


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def save_checkpoint(stem: str | os.PathLike, model: Dreamer, cfg: ProtocolConfig, meta: dict[str, Any] | None = None,
                    optimizer: bool = True, versioned: bool = False) -> Path:
    """Write ``stem.safetensors`` and ``stem.json``. Returns the JSON path.

    ``versioned``: the tensors go to a new ``stem.<k>.safetensors`` that the JSON names, and the
    older tensor files are removed only after the JSON is in place, so a kill at any moment
    leaves a JSON whose tensor file exists and matches its digest (with one ``stem.safetensors``
    rewritten in place, a kill between the two writes leaves new tensors beside the old JSON)."""
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in model.state_dict().items()}
    if optimizer:
        tensors.update({f"opt.{k}": v for k, v in model.optimizer_tensors().items()})
    return save_tensors(stem, tensors, cfg.to_dict(), meta, versioned=versioned, agent=cfg.agent)


def save_tensors(stem: str | os.PathLike, tensors: dict[str, torch.Tensor], config: dict[str, Any],
                 meta: dict[str, Any] | None = None, versioned: bool = False, agent: str = "") -> Path:
    """The checkpoint files of :func:`save_checkpoint` from ready tensors (model ``state_dict`` names,
    ``opt.*`` Adam state) and a config as a dict; returns the JSON path."""
    stem = Path(stem)
    old = sorted(stem.parent.glob(f"{stem.name}.*.safetensors")) if versioned else []
    if versioned:
        k = 1 + max((int(p.name[len(stem.name) + 1:-len(".safetensors")]) for p in old
                     if p.name[len(stem.name) + 1:-len(".safetensors")].isdigit()), default=0)
        st_path = stem.parent / f"{stem.name}.{k}.safetensors"
    else:
        st_path = stem.with_suffix(".safetensors")
    with atomic_tmp_path(st_path) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "metacog_fast.dreamer", "agent": agent})
    doc = {"config": config, "meta": meta or {}, "tensors": st_path.name, "sha256": _digest(st_path),
           "bytes": st_path.stat().st_size}
    out = atomic_write_json(stem.with_suffix(".json"), doc)
    for p in old:
        p.unlink(missing_ok=True)
    return out


def read_config(stem: str | os.PathLike) -> tuple[ProtocolConfig, dict[str, Any]]:
    """The config and metadata of a checkpoint. ValueError on a missing or malformed JSON."""
    jp = Path(stem).with_suffix(".json")
    if not jp.exists():
        raise ValueError(f"checkpoint: {jp} does not exist (expected <stem>.json beside <stem>.safetensors)")
    try:
        doc = json.loads(jp.read_text())
        cfg = ProtocolConfig.from_dict(doc["config"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"checkpoint: {jp} is not a valid checkpoint JSON ({exc})") from exc
    return cfg, doc


def load_checkpoint(stem: str | os.PathLike, cfg: ProtocolConfig | None = None,
                    optimizer: bool = True) -> tuple[Dreamer, ProtocolConfig, dict[str, Any]]:
    """Rebuild the model (and its optimiser state) from a checkpoint. ``cfg`` overrides the saved
    config's non-model fields (the model sizes always come from the checkpoint)."""
    saved, doc = read_config(stem)
    use = cfg if cfg is not None else saved
    mcfg = saved.model
    mcfg.muse = use.model.muse
    model = Dreamer(mcfg)
    tensors = read_tensors(stem, doc)
    st_path = Path(stem).with_suffix(".safetensors")
    sd = {k: v for k, v in tensors.items() if not k.startswith("opt.")}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ValueError(f"checkpoint {st_path}: missing keys {missing[:5]}, unexpected keys {unexpected[:5]}")
    if optimizer:
        model.load_optimizer_tensors({k[4:]: v for k, v in tensors.items() if k.startswith("opt.")})
    return model, use, doc.get("meta", {})


def read_tensors(stem: str | os.PathLike, doc: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors of the file ``doc["tensors"]`` names beside ``stem`` (default ``stem.safetensors``),
    checked against the size and digest the JSON ``doc`` holds before it is read. ValueError when the
    file is missing or does not match (a partial write, damage, another file)."""
    return load_file(str(checked_tensor_file(stem, doc)))


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """JSON-able state of a numpy Generator (PCG64)."""
    return rng.bit_generator.state


def set_rng_state(rng: np.random.Generator, state: dict[str, Any]) -> None:
    rng.bit_generator.state = state


def torch_rng_bytes() -> list[int]:
    return torch.get_rng_state().tolist()


def set_torch_rng(state: list[int]) -> None:
    torch.set_rng_state(torch.tensor(state, dtype=torch.uint8))
