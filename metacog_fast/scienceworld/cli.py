"""``metacog run scienceworld``, ``metacog report scienceworld <run>`` and
``metacog report scienceworld-swift <run>`` (ranker vs LLM Swift on held-out gold steps).

Flags come from :class:`metacog_fast.scienceworld.runner.RunConfig` and
:class:`~metacog_fast.runs.ExecutorConfig`; folders are plain arguments.
"""
from __future__ import annotations

import argparse
import json

from metacog_fast.scienceworld.config import CONFIG_NAMES
from metacog_fast.cli.dataclass_args import Flags, add_config_flags, config_from_args
from metacog_fast.cli.executor import EXECUTOR_FLAGS


def parse_configs(text: str) -> list[str]:
    """``"all"`` -> every configuration; ``"srm,full"`` -> those (checked by ``RunConfig.validate``)."""
    if text.strip() == "all":
        return list(CONFIG_NAMES)
    out = [c.strip() for c in text.split(",") if c.strip()]
    if not out:
        raise ValueError(f"expected all or a comma list of {', '.join(CONFIG_NAMES)}, got {text!r}")
    return out


def run_flags() -> Flags:
    """The flags of ``metacog run scienceworld`` (``RunConfig`` lives in the runner module)."""
    from metacog_fast.scienceworld.config import SWIFT_KINDS
    from metacog_fast.scienceworld.runner import RunConfig, parse_tasks

    return Flags(RunConfig, aliases={"configs": ("--config",), "warmup_per_task": ("--warmup",)},
                 parsers={"configs": parse_configs, "tasks": parse_tasks},
                 shown={"configs": "all", "tasks": "0-29"},
                 choices={"swift": SWIFT_KINDS, "memory_embed": ("hash", "minilm")})


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    add_config_flags(p, run_flags(), EXECUTOR_FLAGS)
    p.add_argument("--out", required=True, help="run folder (resumed when it exists)")


def run_cmd(a: argparse.Namespace) -> int:
    cfg, executor = config_from_args(run_flags(), a), config_from_args(EXECUTOR_FLAGS, a)
    from metacog_fast.scienceworld.runner import run_protocol

    print(json.dumps(run_protocol(a.out, cfg, executor=executor)))
    return 0


def report_cmd(a: argparse.Namespace) -> int:
    from metacog_fast.scienceworld.report import report

    report(a.run, a.out, all_episodes=a.all_episodes)
    with open(f"{a.out or a.run}/tables.md") as f:
        print(f.read())
    return 0


def attach_run(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog run scienceworld``."""
    add_run_arguments(p)
    p.set_defaults(func=run_cmd)


def swift_eval_flags() -> Flags:
    from metacog_fast.scienceworld.runner import parse_tasks
    from metacog_fast.scienceworld.swift_eval import SwiftEvalConfig

    return Flags(SwiftEvalConfig, parsers={"tasks": parse_tasks}, shown={"tasks": "0-29"})


def swift_eval_cmd(a: argparse.Namespace) -> int:
    cfg = config_from_args(swift_eval_flags(), a)
    from metacog_fast.scienceworld.swift_eval import evaluate_swift

    print(json.dumps(evaluate_swift(a.run, cfg, a.out)))
    return 0


def attach_swift_eval(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog report scienceworld-swift``."""
    p.add_argument("run", help="run folder holding ranker.npz")
    add_config_flags(p, swift_eval_flags())
    p.add_argument("--out", required=True, help="result JSON")
    p.set_defaults(func=swift_eval_cmd)


def attach_report(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog report scienceworld``."""
    p.add_argument("run", help="run folder")
    p.add_argument("--out", default=None, help="output folder (default: the run)")
    p.add_argument("--all-episodes", action="store_true",
                   help="count every episode (default: only task/variations every configuration ran)")
    p.set_defaults(func=report_cmd)
