"""Ship an exported LoRA adapter as the package's ``finetuned:alfworld`` (docs/finetune.md, "The shipped
model"). The adapter folder's model.json is kept as the export wrote it, plus what a user of the
shipped model needs: its evaluation (read from the evaluation folder's summary.json, never typed in),
the paired comparisons behind the decision, the commands that rebuild it, a name and a description.
Files are written beside the target and renamed into place, so a kill leaves the old model whole.

  .venv/bin/python scripts/ship_actor.py --adapter runs/finetune/model_dagger1_adapter \
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


def evaluation_of(folder: Path, record: str) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    cfg = summary["config"]
    return {"record": record, "split": cfg["split"], "games": summary["games"], "episodes": summary["episodes"],
            "max_steps": cfg["max_steps"], "map_actions": cfg["map_actions"], "success": summary["success"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--adapter", type=Path, required=True, help="export folder (--format adapter)")
    ap.add_argument("--evaluation", type=Path, required=True, help="`metacog finetune eval` folder of this adapter")
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
    llm = str(json.loads((args.evaluation / "summary.json").read_text())["config"]["llm"])
    if Path(llm.removeprefix("llama-cpp://")).resolve() != args.adapter.resolve():
        raise SystemExit(f"--evaluation: {args.evaluation} evaluated {llm!r}, not the adapter {args.adapter}")
    info["evaluation"] = evaluation_of(args.evaluation, args.record)
    info["evaluation"]["paired"] = dict(x.split("=", 1) for x in args.paired)
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
    print(f"shipped {args.adapter} as finetuned:{args.name}: {info['evaluation']['success']}")


if __name__ == "__main__":
    main()
