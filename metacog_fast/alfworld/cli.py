"""``metacog run alfworld``, ``metacog pretrain alfworld``, ``metacog report alfworld <run>``,
``metacog report alfworld-assessor <run>``.

Each command line is a dataclass read by tyro (:mod:`metacog_fast.cli.dataclass_args`): views of
:class:`~metacog_fast.alfworld.config.RunConfig` (with its
:class:`~metacog_fast.alfworld.config.AgentConfig`), :class:`~metacog_fast.alfworld.config.PretrainConfig`
and :class:`~metacog_fast.runs.ExecutorConfig` (where the task-type groups run), and the folders.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from metacog_fast.alfworld.config import (
    AGENT_NAMES,
    MAP_MODES,
    REFLECT_ON,
    SEED_SCHEMES,
    TRIGGER_ACTIONS,
    AgentConfig,
    PretrainConfig,
    RunConfig,
)
from metacog_fast.cli import checks
from metacog_fast.cli.dataclass_args import ConfigError, add_command, build, parse, view
from metacog_fast.cli.executor import ExecutorFlags



def games_found(split: str, data: str | None) -> None:
    """The split's games are where ``data`` (None: the default lookup) says: a glob, no env opened."""
    from metacog_fast.alfworld.env import find_split_dir
    from metacog_fast.envs.base import EnvSetupError

    try:
        find_split_dir(split, data)
    except EnvSetupError as e:  # "split: ... is not in the data folder", else no games where data points
        raise ValueError(str(e) if str(e).startswith("split:") else f"data: {e}") from None


_RUN_CHECKS = {"data": checks.existing_dir, "llm": checks.llm_uri, "reflector": checks.llm_uri}

AgentFlags = view(AgentConfig, choices={"map_actions": MAP_MODES, "reflect_on": REFLECT_ON, "seed_scheme": SEED_SCHEMES,
                                        "trigger_action": TRIGGER_ACTIONS})
"""Per-episode behaviour, shared by ``run`` and ``pretrain``."""
RunFlags = view(RunConfig, required=("agent",), choices={"agent": AGENT_NAMES},
                aliases={"test_episodes": ("--episodes",)}, nested={"agent_config": AgentFlags},
                checks={**_RUN_CHECKS, "scorer": checks.existing_dir},
                check=lambda cfg: games_found(cfg.split, cfg.data))
"""``metacog run alfworld``: one protocol run, its agent settings flat beside it."""
PretrainFlags = view(PretrainConfig)
"""``metacog pretrain alfworld``: the collection and M_sa training."""
PretrainLLMFlags = view(RunConfig, only=("data", "llm", "reflector", "n_threads", "n_ctx", "workers"),
                        nested={"agent_config": AgentFlags}, checks=_RUN_CHECKS)
"""The run settings pre-deployment shares with a protocol run (the agent is fixed: Reflexion)."""


@dataclass
class RunCommand:
    """ALFWorld language agents (ReAct, Reflexion, MUSE, FCRF): one protocol run."""

    run: RunFlags
    executor: ExecutorFlags
    out: str
    """Run folder (resumed when it exists)."""
    fewshot: str | None = None
    """Few-shot cache JSON (None: results/alfworld/fewshot.json)."""


@dataclass
class PretrainCommand:
    """MUSE pre-deployment on ALFWorld (Reflexion data + M_sa training)."""

    pretrain: PretrainFlags
    run: PretrainLLMFlags
    executor: ExecutorFlags
    out: str
    """Output folder (collect/, scorer/, pretrain.json)."""
    fewshot: str | None = None
    """Few-shot cache JSON (None: results/alfworld/fewshot.json)."""


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    add_command(p, RunCommand)


def run_config(a: argparse.Namespace) -> RunConfig:
    """The RunConfig of parsed ``metacog run alfworld`` arguments."""
    return build(parse(a, RunCommand).run)


def run_cmd(a: argparse.Namespace) -> int:
    cfg = run_config(a)
    cmd = parse(a, RunCommand)
    executor = build(cmd.executor)
    from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT, run_protocol

    print(json.dumps(run_protocol(cmd.out, cfg, cmd.fewshot or DEFAULT_FEWSHOT, executor=executor)))
    return 0


def add_pretrain_arguments(p: argparse.ArgumentParser) -> None:
    add_command(p, PretrainCommand)


def pretrain_configs(a: argparse.Namespace) -> tuple[PretrainConfig, RunConfig]:
    """(PretrainConfig, the Reflexion RunConfig with its AgentConfig) of ``metacog pretrain alfworld``."""
    cmd = parse(a, PretrainCommand)
    pc, run = build(cmd.pretrain), build(cmd.run, agent="reflexion")
    try:
        games_found(pc.split, run.data)
    except ValueError as e:  # the split is PretrainConfig's, the data folder RunConfig's: name the flag here
        field, _, rest = str(e).partition(":")
        raise ConfigError(f"--{field} ({field}):{rest}") from None
    return pc, run


def pretrain_cmd(a: argparse.Namespace) -> int:
    pc, run = pretrain_configs(a)
    cmd = parse(a, PretrainCommand)
    executor = build(cmd.executor)
    from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT, pretrain

    facts = pretrain(cmd.out, pc, run, fewshot=cmd.fewshot or DEFAULT_FEWSHOT, executor=executor)
    print(json.dumps(facts))
    return 0


def report_cmd(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.report import report

    report(a.run, a.out)
    with open(f"{a.out or a.run}/tables.md") as f:
        print(f.read())
    return 0


def attach_run(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog run alfworld``."""
    add_run_arguments(p)
    p.set_defaults(func=run_cmd)


def attach_pretrain(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog pretrain alfworld``."""
    add_pretrain_arguments(p)
    p.set_defaults(func=pretrain_cmd)


def attach_report(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog report alfworld`` (no configuration: plain arguments)."""
    p.add_argument("run", help="a run folder, or a folder holding several (one per agent)")
    p.add_argument("--out", default=None, help="where report.json, tables.md and plots go (default: the run)")
    p.set_defaults(func=report_cmd)


def assessor_report_cmd(a: argparse.Namespace) -> int:
    from metacog_fast.alfworld.assessor_report import assessor_report

    try:
        assessor_report(a.run, a.out, folds=a.folds, bins=a.bins, resamples=a.resamples, seed=a.seed)
    except ValueError as e:  # a folder without MUSE runs, or a bad --folds / --bins / --resamples / --seed
        name, _, rest = str(e).partition(":")
        if name in ("run", "folds", "bins", "resamples", "seed"):
            raise ConfigError(f"{name if name == 'run' else '--' + name}:{rest}") from None
        raise
    with open(f"{a.out or a.run}/assessor.md") as f:
        print(f.read())
    return 0


def attach_assessor_report(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog report alfworld-assessor`` (plain arguments, as ``report alfworld``)."""
    p.add_argument("run", help="a MUSE run folder, or a folder holding several (runs without M_sa are skipped)")
    p.add_argument("--out", default=None,
                   help="where assessor.json, assessor.md and the plots go (default: the run)")
    p.add_argument("--folds", type=int, default=5, help="folds of games the trivial predictors are cross-fitted over")
    p.add_argument("--bins", type=int, default=10, help="equal-width probability bins of the ECE")
    p.add_argument("--resamples", type=int, default=10000, help="bootstrap resamples of every interval")
    p.add_argument("--seed", type=int, default=0, help="seed of the folds and the resamples")
    p.set_defaults(func=assessor_report_cmd)
