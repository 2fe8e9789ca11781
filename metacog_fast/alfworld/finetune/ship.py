"""``metacog finetune ship``: an exported LoRA adapter shipped inside the package as ``finetuned:NAME``
(docs/finetune.md, "The shipped models").

The adapter folder's model.json is kept as the export wrote it, plus what a user of the shipped model
needs: its evaluation (read from the record, never typed in), the paired comparisons behind the
decision, the commands that rebuild it, a name and a description. Files are written beside the target
and renamed into place, so a kill leaves the old model whole.

Two roles:
  actor      ``--evaluation`` is the adapter's own ``metacog finetune eval`` folder (its summary.json);
  reflector  ``--evaluation`` is a ``metacog finetune reflections-compare`` JSON whose side A reflected
             with this adapter (checked by content: the collection's recorded adapter sha256).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from metacog_fast.cli.dataclass_args import ConfigError, add_command, build, parse, view


@dataclass
class ShipConfig:
    """What to ship, and the record that justifies it."""

    adapter: str
    """export folder (--format adapter)"""
    evaluation: str
    """actor: `metacog finetune eval` folder of this adapter; reflector: reflections-compare JSON"""
    record: str
    """where the evaluation is committed, as the docs cite it"""
    reproduce: tuple[str, ...]
    """the command(s) that rebuild it (one word each: quote them)"""
    description: str
    """what the model is, in one sentence"""
    role: Literal["actor", "reflector"] = "actor"
    """what the model is for"""
    paired: tuple[str, ...] = ()
    """paired comparisons behind the decision: NAME=PATH words"""
    init_adapter: str | None = None
    """replaces training.init_adapter (a path in runs/ says nothing to a user)"""
    name: str = "alfworld"
    """the shipped model's name (finetuned:NAME)"""
    models_root: str | None = None
    """where the model folder goes (default: the package's shipped models)"""


def actor_evaluation(folder: Path, adapter: Path, record: str) -> dict:
    """The evaluation of an actor: its `finetune eval` summary, which must have evaluated ``adapter``."""
    summary = json.loads((folder / "summary.json").read_text())
    cfg = summary["config"]
    if Path(str(cfg["llm"]).removeprefix("llama-cpp://")).resolve() != adapter.resolve():
        raise ValueError(f"--evaluation: {folder} evaluated {cfg['llm']!r}, not the adapter {adapter}")
    return {"record": record, "split": cfg["split"], "games": summary["games"], "episodes": summary["episodes"],
            "max_steps": cfg["max_steps"], "map_actions": cfg["map_actions"], "success": summary["success"]}


def reflector_evaluation(path: Path, adapter_sha256: str, record: str) -> dict:
    """The evaluation of a reflector: a reflections-compare result whose side A reflected with the adapter."""
    cmp = json.loads(path.read_text())
    side_a = ((cmp.get("identity_a") or {}).get("reflector") or {})
    if side_a.get("adapter_sha256") != adapter_sha256:
        raise ValueError(f"--evaluation: side A of {path} reflected with adapter "
                         f"{side_a.get('adapter_sha256')!r}, not this adapter ({adapter_sha256})")
    return {"record": record, "measure": "success of the attempt that follows a reflection, same games",
            "actor": cmp["actor"], "reflector_b": cmp["reflector_b"], "games": cmp["games"],
            "quality": cmp["quality_a"], "quality_b": cmp["quality_b"], "paired_vs_b": cmp["paired"]}


def ship(cfg: ShipConfig) -> tuple[Path, dict]:
    """Copy the adapter into ``models_root/NAME`` with its model.json completed; returns (folder, model.json).
    Bad input raises ValueError naming the flag."""
    from metacog_fast.llm.models import SHIPPED_MODELS

    adapter = Path(cfg.adapter)
    info = json.loads((adapter / "model.json").read_text())
    if info.get("format") != "adapter":
        raise ValueError(f"--adapter: {adapter} holds format {info.get('format')!r}, expected an adapter export")
    pairs = [x.split("=", 1) for x in cfg.paired]
    for p in pairs:
        if len(p) != 2 or not Path(p[1]).is_file():
            raise ValueError(f"--paired: expected NAME=PATH of an existing file, got {'='.join(p)!r}")
    if cfg.role == "actor":
        info["evaluation"] = actor_evaluation(Path(cfg.evaluation), adapter, cfg.record)
    else:
        info["evaluation"] = reflector_evaluation(Path(cfg.evaluation), info["sha256"], cfg.record)
    info["evaluation"]["paired"] = dict(pairs)
    info["role"] = cfg.role
    info["reproduce"] = list(cfg.reproduce)
    info["name"] = cfg.name
    info["description"] = cfg.description
    if cfg.init_adapter:
        info.setdefault("training", {})["init_adapter"] = cfg.init_adapter

    target = Path(cfg.models_root or SHIPPED_MODELS) / cfg.name
    target.mkdir(parents=True, exist_ok=True)
    tmp_gguf, tmp_json = target / f".{info['file']}.tmp", target / ".model.json.tmp"
    shutil.copyfile(adapter / info["file"], tmp_gguf)
    tmp_json.write_text(json.dumps(info, indent=1) + "\n")
    os.replace(tmp_gguf, target / info["file"])
    os.replace(tmp_json, target / "model.json")
    return target, info


def run(a: argparse.Namespace) -> int:
    """``metacog finetune ship`` (its parser: :data:`SHIP_VIEW` through ``add_command``)."""
    cfg = build(parse(a, SHIP_VIEW))
    try:
        _, info = ship(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    shown = info["evaluation"].get("success") or info["evaluation"].get("quality")
    print(f"shipped {cfg.adapter} as finetuned:{cfg.name} ({cfg.role}): {shown}")
    return 0


SHIP_VIEW = view(ShipConfig, spaced=("reproduce", "paired"))
HELP = "ship an exported adapter in the package as finetuned:NAME, with its evaluation read from the record"
