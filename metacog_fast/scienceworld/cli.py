"""``metacog run scienceworld``, ``metacog report scienceworld <run>`` and
``metacog report scienceworld-swift <run>`` (ranker vs LLM Swift on held-out gold steps).

(No ``from __future__ import annotations``: the command dataclasses are made in functions, their
field types are the views made there.) Command lines are dataclasses read by tyro (:mod:`metacog_fast.cli.dataclass_args`): views of
:class:`metacog_fast.scienceworld.runner.RunConfig`, :class:`~metacog_fast.runs.ExecutorConfig` and
:class:`~metacog_fast.scienceworld.swift_eval.SwiftEvalConfig`, and the folders.
"""
import argparse
import json
from dataclasses import dataclass

import tyro

from metacog_fast.cli import checks
from metacog_fast.cli.dataclass_args import add_command, build, parse, view
from metacog_fast.cli.executor import ExecutorFlags
from metacog_fast.scienceworld.config import CONFIG_NAMES, SWIFT_KINDS


def parse_configs(text: str) -> list[str]:
    """``"all"`` -> every configuration; ``"srm,full"`` -> those (checked by ``RunConfig.validate``)."""
    if text.strip() == "all":
        return list(CONFIG_NAMES)
    out = [c.strip() for c in text.split(",") if c.strip()]
    if not out:
        raise ValueError(f"expected all or a comma list of {', '.join(CONFIG_NAMES)}, got {text!r}")
    return out


def _parse_tasks(text: str) -> list[int]:
    from metacog_fast.scienceworld.runner import parse_tasks

    return parse_tasks(text)


def _run_flags() -> type:
    from metacog_fast.scienceworld.runner import RunConfig

    return view(RunConfig, aliases={"configs": ("--config",), "warmup_per_task": ("--warmup",)},
                parsers={"configs": parse_configs, "tasks": _parse_tasks}, shown={"configs": "all", "tasks": "0-29"},
                choices={"swift": SWIFT_KINDS, "memory_embed": ("hash", "minilm")}, checks={"llm": checks.llm_uri})


def _swift_eval_flags() -> type:
    from metacog_fast.scienceworld.swift_eval import SwiftEvalConfig

    return view(SwiftEvalConfig, parsers={"tasks": _parse_tasks}, shown={"tasks": "0-29"})


def run_command() -> type:
    """The command line of ``metacog run scienceworld`` (``RunConfig`` lives in the runner module)."""
    run_flags = _run_flags()

    @dataclass
    class RunCommand:
        """ScienceWorld dual-process agent (baseline/amm/srm/full)."""

        run: run_flags  # type: ignore[valid-type]
        executor: ExecutorFlags  # type: ignore[valid-type]
        out: str
        """Run folder (resumed when it exists)."""

    return RunCommand


def swift_eval_command() -> type:
    """The command line of ``metacog report scienceworld-swift``."""
    swift_flags = _swift_eval_flags()

    @dataclass
    class SwiftEvalCommand:
        """Which ScienceWorld Swift is better: a run's ranker vs the LLM, top-1 agreement with held-out gold steps."""

        run: tyro.conf.Positional[str]
        """Run folder holding ranker.npz."""
        swift: swift_flags  # type: ignore[valid-type]
        out: str
        """Result JSON."""

    return SwiftEvalCommand


def run_cmd(a: argparse.Namespace) -> int:
    cmd = parse(a)
    cfg, executor = build(cmd.run), build(cmd.executor)
    from metacog_fast.scienceworld.runner import run_protocol

    print(json.dumps(run_protocol(cmd.out, cfg, executor=executor)))
    return 0


def report_cmd(a: argparse.Namespace) -> int:
    from metacog_fast.scienceworld.report import report

    report(a.run, a.out, all_episodes=a.all_episodes)
    with open(f"{a.out or a.run}/tables.md") as f:
        print(f.read())
    return 0


def attach_run(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog run scienceworld``."""
    add_command(p, run_command())
    p.set_defaults(func=run_cmd)


def swift_eval_cmd(a: argparse.Namespace) -> int:
    cmd = parse(a)
    cfg = build(cmd.swift)
    from metacog_fast.scienceworld.swift_eval import evaluate_swift

    print(json.dumps(evaluate_swift(cmd.run, cfg, cmd.out)))
    return 0


def attach_swift_eval(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog report scienceworld-swift``."""
    add_command(p, swift_eval_command())
    p.set_defaults(func=swift_eval_cmd)


def attach_report(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog report scienceworld`` (no configuration: plain arguments)."""
    p.add_argument("run", help="run folder")
    p.add_argument("--out", default=None, help="output folder (default: the run)")
    p.add_argument("--all-episodes", action="store_true",
                   help="count every episode (default: only task/variations every configuration ran)")
    p.set_defaults(func=report_cmd)
