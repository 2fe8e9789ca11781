"""Ship an exported LoRA adapter inside the package as ``finetuned:NAME`` (docs/finetune.md, "The shipped
models"). The adapter folder's model.json is kept as the export wrote it, plus what a user of the shipped
model needs: its evaluation (read from the record, never typed in), the paired comparisons behind the
decision, the commands that rebuild it, a name and a description. Files are written beside the target
and renamed into place, so a kill leaves the old model whole.

Two roles:
  actor      --evaluation is the adapter's own `metacog finetune eval` folder (its summary.json);
  reflector  --evaluation is a `metacog finetune reflections-compare` JSON whose side A reflected with
             this adapter (checked by content: the collection's recorded adapter sha256).

  .venv/bin/python scripts/ship_model.py --adapter runs/finetune/model_dagger1_adapter \
      --evaluation results/finetune/eval_dagger1_shipped_120 --record "results/finetune/ (eval_dagger1_shipped_120)" \
      --paired vs_previous_shipped=results/finetune/compare_dagger1_vs_dagger0_120.json \
      --reproduce "bash scripts/finetune_dagger.sh   # ..." --description "..."
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from metacog_fast.llm.models import SHIPPED_MODELS


def actor_evaluation(folder: Path, adapter: Path, record: str) -> dict:
    """The evaluation of an actor: its `finetune eval` summary, which must have evaluated ``adapter``."""
    summary = json.loads((folder / "summary.json").read_text())
    cfg = summary["config"]
    if Path(str(cfg["llm"]).removeprefix("llama-cpp://")).resolve() != adapter.resolve():
        raise SystemExit(f"--evaluation: {folder} evaluated {cfg['llm']!r}, not the adapter {adapter}")
    return {"record": record, "split": cfg["split"], "games": summary["games"], "episodes": summary["episodes"],
            "max_steps": cfg["max_steps"], "map_actions": cfg["map_actions"], "success": summary["success"]}


def reflector_evaluation(path: Path, adapter_sha256: str, record: str) -> dict:
    """The evaluation of a reflector: a reflections-compare result whose side A reflected with the adapter."""
    cmp = json.loads(path.read_text())
    side_a = ((cmp.get("identity_a") or {}).get("reflector") or {})
    if side_a.get("adapter_sha256") != adapter_sha256:
        raise SystemExit(f"--evaluation: side A of {path} reflected with adapter "
                         f"{side_a.get('adapter_sha256')!r}, not this adapter ({adapter_sha256})")
    return {"record": record, "measure": "success of the attempt that follows a reflection, same games",
            "actor": cmp["actor"], "reflector_b": cmp["reflector_b"], "games": cmp["games"],
            "quality": cmp["quality_a"], "quality_b": cmp["quality_b"], "paired_vs_b": cmp["paired"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adapter", type=Path, required=True, help="export folder (--format adapter)")
    ap.add_argument("--role", choices=("actor", "reflector"), default="actor", help="what the model is for")
    ap.add_argument("--evaluation", type=Path, required=True,
                    help="actor: `metacog finetune eval` folder of this adapter; reflector: reflections-compare JSON")
    ap.add_argument("--record", required=True, help="where the evaluation is committed, as the docs cite it")
    ap.add_argument("--paired", nargs="*", default=[], metavar="NAME=PATH", help="paired comparisons behind the decision")
    ap.add_argument("--reproduce", action="append", required=True, help="a command that rebuilds it (repeatable)")
    ap.add_argument("--description", required=True)
    ap.add_argument("--init-adapter", help="replaces training.init_adapter (a path in runs/ says nothing to a user)")
    ap.add_argument("--name", default="alfworld", help="the shipped model's name")
    ap.add_argument("--models-root", type=Path, default=SHIPPED_MODELS, help="where the model folder goes (the package's)")
    args = ap.parse_args()

    info = json.loads((args.adapter / "model.json").read_text())
    if info.get("format") != "adapter":
        raise SystemExit(f"--adapter: {args.adapter} holds format {info.get('format')!r}, expected an adapter export")
    for p in [x.split("=", 1) for x in args.paired]:
        if len(p) != 2 or not Path(p[1]).is_file():
            raise SystemExit(f"--paired: expected NAME=PATH of an existing file, got {'='.join(p)!r}")
    if args.role == "actor":
        info["evaluation"] = actor_evaluation(args.evaluation, args.adapter, args.record)
    else:
        info["evaluation"] = reflector_evaluation(args.evaluation, info["sha256"], args.record)
    info["evaluation"]["paired"] = dict(x.split("=", 1) for x in args.paired)
    info["role"] = args.role
    info["reproduce"] = args.reproduce
    info["name"] = args.name
    info["description"] = args.description
    if args.init_adapter:
        info.setdefault("training", {})["init_adapter"] = args.init_adapter

    target = args.models_root / args.name
    target.mkdir(parents=True, exist_ok=True)
    tmp_gguf, tmp_json = target / f".{info['file']}.tmp", target / ".model.json.tmp"
    shutil.copyfile(args.adapter / info["file"], tmp_gguf)
    tmp_json.write_text(json.dumps(info, indent=1) + "\n")
    os.replace(tmp_gguf, target / info["file"])
    os.replace(tmp_json, target / "model.json")
    shown = info["evaluation"].get("success") or info["evaluation"].get("quality")
    print(f"shipped {args.adapter} as finetuned:{args.name} ({args.role}): {shown}")


if __name__ == "__main__":
    main()
