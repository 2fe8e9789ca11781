"""``metacog learn alfworld|scienceworld ...`` and ``metacog memory show|export|import``.

Also runnable as ``python -m metacog_fast.agents.experience.cli learn alfworld ...``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from metacog_fast.agents.experience.config import ExperienceConfig
from metacog_fast.agents.experience.memory import ExperienceMemory, open_store


def add_learn_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("learn", help="continuous learning / transfer / cross-model with experience memory")
    p.add_argument("env", choices=["alfworld", "scienceworld"])
    p.add_argument("--protocol", choices=["continuous", "transfer", "cross-model"], default="continuous")
    p.add_argument("--iterations", type=int, default=3)
    p.add_argument("--split", default=None, help="default: valid_seen (ALFWorld) / train (ScienceWorld)")
    p.add_argument("--games", default="0,1", help="ALFWorld: indices (e.g. 0,5,13 or 10-12); ScienceWorld: task:var,...")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--llm", default=None, help="LLM URI (default: METACOG_LLM or llama-cpp://)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--embedder", choices=["hashing", "minilm"], default="hashing")
    p.add_argument("--memory-in", default=None, help="exported memory JSON to start from (transfer, cross-model)")
    p.add_argument("--out", default="results/experience/run")
    p.add_argument("--episode-actions", type=int, default=50)
    p.add_argument("--subtask-actions", type=int, default=20)
    p.add_argument("--grounding", choices=["choice", "embed", "choose"], default="choice",
                   help="how the actor's turn becomes an admissible command (ExperienceConfig.action_grounding)")
    p.add_argument("--shortlist", type=int, default=8,
                   help="commands offered per turn, nearest to the sub-task (0: all; ExperienceConfig.action_shortlist)")
    p.add_argument("--no-subtask-commands", action="store_true",
                   help="do not offer only the commands that spell out the sub-task (ExperienceConfig.subtask_as_command)")
    p.add_argument("--hide-strategic", action="store_true",
                   help="ablation: keep distilling strategic memory but show it in no prompt (ExperienceConfig.show_strategic)")
    p.add_argument("--no-loop-breaking", action="store_true",
                   help="offer commands repeated with an unchanged observation again (ExperienceConfig.loop_breaking)")
    p.set_defaults(func=run_learn)
    return p


def add_memory_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser("memory", help="show, export or import experience memory")
    sub = p.add_subparsers(dest="memory_cmd", required=True)
    s = sub.add_parser("show", help="print a memory (JSON file or memory store .db)")
    s.add_argument("source")
    e = sub.add_parser("export", help="memory store .db -> readable JSON")
    e.add_argument("db")
    e.add_argument("json")
    i = sub.add_parser("import", help="readable JSON -> memory store .db (merged into what is there)")
    i.add_argument("json")
    i.add_argument("db")
    p.set_defaults(func=run_memory)
    return p


def parse_games(text: str, env: str) -> list[str]:
    out: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if env == "alfworld" and "-" in part:
            a, b = part.split("-", 1)
            if not (a.isdigit() and b.isdigit()) or int(b) < int(a):
                raise ValueError(f"--games: bad range {part!r} (expected e.g. 10-12)")
            out += [str(i) for i in range(int(a), int(b) + 1)]
        else:
            out.append(part)
    if not out:
        raise ValueError("--games: no game given")
    return out


def run_learn(args: argparse.Namespace) -> int:
    from metacog_fast.agents.experience import protocols as pt

    if args.iterations < 1:
        raise SystemExit("--iterations must be >= 1")
    cfg = pt.ProtocolConfig(env=args.env, split=args.split or ("valid_seen" if args.env == "alfworld" else "train"),
                            games=parse_games(args.games, args.env), iterations=args.iterations,
                            baseline=not args.no_baseline, llm_uri=args.llm, n_threads=args.threads,
                            embedder=args.embedder, memory_in=args.memory_in, out=args.out)
    exp = ExperienceConfig(episode_action_cap=args.episode_actions, subtask_action_cap=args.subtask_actions,
                           action_grounding=args.grounding, loop_breaking=not args.no_loop_breaking,
                           action_shortlist=args.shortlist, subtask_as_command=not args.no_subtask_commands,
                           show_strategic=not args.hide_strategic)
    if args.protocol == "continuous":
        m = pt.continuous_learning(cfg, exp)
    else:
        m = pt.transfer(cfg, exp)
    for r in m["rows"]:
        print(f"{r['condition']:>9} it{r['iteration']}: success {r['success_rate']:.2f} score {r['mean_score']:.2f} "
              f"subtask {r['subtask_success']:.2f} tokens/task {r['tokens_per_task']:.0f}")
    print(f"results in {cfg.out}")
    return 0


def _load_any(source: str) -> ExperienceMemory:
    if not os.path.exists(source):
        raise SystemExit(f"memory source not found: {source}")
    if source.endswith(".json"):
        mem = ExperienceMemory()
        mem.load_json(source, merge=False)
        return mem
    store = open_store(source)
    try:
        return ExperienceMemory.load(store)
    finally:
        store.close()


def run_memory(args: argparse.Namespace) -> int:
    if args.memory_cmd == "show":
        mem = _load_any(args.source)
        print(f"sizes: {mem.sizes()}")
        print("strategic:")
        for s in mem.strategic:
            print(f"  - {s.text()}  [uses {s.counts.uses}, ok {s.counts.successes}, fail {s.counts.failures}]")
        print("procedural:")
        for p in mem.procedural.values():
            print(f"  [{p.status}] {p.key}  [uses {p.counts.uses}, ok {p.counts.successes}, fail {p.counts.failures}]")
            print("    " + p.text().replace("\n", "\n    "))
        print("tool (dynamic):")
        for t in mem.tool.values():
            if t.dynamic:
                print(f"  {t.key}: {t.dynamic}")
    elif args.memory_cmd == "export":
        _load_any(args.db).export_json(args.json)
        print(f"wrote {args.json}")
    else:
        mem = ExperienceMemory()
        mem.load_json(args.json, merge=False)
        store = open_store(args.db)
        try:
            old = ExperienceMemory.load(store)
            old.load_json(mem.to_json(), merge=True)
            n = old.save(store)
        finally:
            store.close()
        print(f"{args.db}: {n} entries")
    return 0


def attach_learn(subparsers: Any) -> argparse.ArgumentParser:
    return add_learn_parser(subparsers)


def attach_memory(subparsers: Any) -> argparse.ArgumentParser:
    return add_memory_parser(subparsers)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="metacog")
    sub = p.add_subparsers(dest="cmd", required=True)
    add_learn_parser(sub)
    add_memory_parser(sub)
    args = p.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
