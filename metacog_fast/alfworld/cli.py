"""``metacog run alfworld``, ``metacog pretrain alfworld``, ``metacog report alfworld <run>``.

Flags come from :class:`~metacog_fast.alfworld.config.RunConfig`,
:class:`~metacog_fast.alfworld.config.AgentConfig` and
:class:`~metacog_fast.alfworld.config.PretrainConfig` and
:class:`~metacog_fast.runs.ExecutorConfig` (where the task-type groups run); folders are plain arguments.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

from metacog_fast.alfworld.config import AGENT_NAMES, MAP_MODES, REFLECT_ON, AgentConfig, PretrainConfig, RunConfig
from metacog_fast.cli.dataclass_args import Flags, add_config_flags, config_from_args
from metacog_fast.cli.executor import EXECUTOR_FLAGS

AGENT_FLAGS = Flags(AgentConfig, choices={"map_actions": MAP_MODES, "reflect_on": REFLECT_ON})
"""Per-episode behaviour, shared by ``run`` and ``pretrain``."""
RUN_FLAGS = Flags(RunConfig, required=("agent",), choices={"agent": AGENT_NAMES},
                  aliases={"test_episodes": ("--episodes",)})
"""``metacog run alfworld``: one protocol run (``agent_config`` is built from :data:`AGENT_FLAGS`)."""
PRETRAIN_FLAGS = Flags(PretrainConfig)
"""``metacog pretrain alfworld``: the collection and M_sa training."""
PRETRAIN_LLM_FLAGS = Flags(RunConfig, only=("data", "llm", "reflector", "n_threads", "n_ctx", "workers"))
"""The run settings pre-deployment shares with a protocol run."""


def _fewshot_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fewshot", default=None, help="few-shot cache JSON (default results/alfworld/fewshot.json)")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    add_config_flags(p, RUN_FLAGS, AGENT_FLAGS, EXECUTOR_FLAGS)
    p.add_argument("--out", required=True, help="run folder (resumed when it exists)")
    _fewshot_arg(p)


def run_config(a: argparse.Namespace) -> RunConfig:
    """The RunConfig of parsed ``metacog run alfworld`` arguments."""
    return config_from_args(RUN_FLAGS, a, agent_config=config_from_args(AGENT_FLAGS, a))


def run_cmd(a: argparse.Namespace) -> int:
    cfg, executor = run_config(a), config_from_args(EXECUTOR_FLAGS, a)
    from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT, run_protocol

    print(json.dumps(run_protocol(a.out, cfg, a.fewshot or DEFAULT_FEWSHOT, executor=executor)))
    return 0


def add_pretrain_arguments(p: argparse.ArgumentParser) -> None:
    add_config_flags(p, PRETRAIN_FLAGS, PRETRAIN_LLM_FLAGS, AGENT_FLAGS, EXECUTOR_FLAGS)
    p.add_argument("--out", required=True, help="output folder (collect/, scorer/, pretrain.json)")
    _fewshot_arg(p)


def pretrain_cmd(a: argparse.Namespace) -> int:
    pc = config_from_args(PRETRAIN_FLAGS, a)
    agent = config_from_args(AGENT_FLAGS, a)
    run = _pretrain_run(a)
    executor = config_from_args(EXECUTOR_FLAGS, a)
    from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT, pretrain

    facts = pretrain(a.out, pc, dataclasses.replace(run, agent_config=agent), fewshot=a.fewshot or DEFAULT_FEWSHOT,
                     executor=executor)
    print(json.dumps(facts))
    return 0


def _pretrain_run(a: argparse.Namespace) -> RunConfig:
    """The run settings of a pre-deployment (a Reflexion run; the agent is fixed by ``pretrain``)."""
    return config_from_args(PRETRAIN_LLM_FLAGS, a, agent="reflexion")


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
    """Fills ``metacog report alfworld``."""
    p.add_argument("run", help="a run folder, or a folder holding several (one per agent)")
    p.add_argument("--out", default=None, help="where report.json, tables.md and plots go (default: the run)")
    p.set_defaults(func=report_cmd)
