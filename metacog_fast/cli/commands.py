"""Commands other parts of the package contribute to ``metacog``, imported only when run.

Their modules pull torch and models (seconds to import), so ``metacog info`` / ``demo`` and
``metacog --help`` must not import them: until its command is chosen, each appears as a
stand-in subparser carrying only its help line.
"""
from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class ExternalCommand:
    """A ``metacog <name>`` command whose code lives in another module."""

    name: str
    """Sub-command name."""
    help: str
    """Help line shown in ``metacog --help`` (without importing the module)."""
    attach: str
    """``"module:function"``; ``function(subparsers)`` adds the ``name`` parser and sets ``func``
    (``func(args) -> int | None``)."""

    def load(self) -> Callable[[Any], Any]:
        module, func = self.attach.split(":")
        return getattr(importlib.import_module(module), func)


def _attach_train(subparsers: Any) -> argparse.ArgumentParser:
    """``metacog train metaworld ...`` -> :func:`metacog_fast.train.cli.run_train`."""
    from metacog_fast.train import cli as train_cli

    p = subparsers.add_parser("train", help=EXTERNAL_COMMANDS["train"].help)
    sub = p.add_subparsers(dest="train_env", required=True, metavar="{metaworld}")
    mw = sub.add_parser("metaworld", help="MUSE-WM / Dreamer-v3 pre-deployment + adaptation on Meta-World")
    train_cli.add_train_arguments(mw)
    mw.set_defaults(func=lambda args: _ran(train_cli.run_train(args)))
    return p


def _attach_adapt(subparsers: Any) -> argparse.ArgumentParser:
    """``metacog adapt metaworld ...`` -> :func:`metacog_fast.train.cli.run_adapt`."""
    from metacog_fast.train import cli as train_cli

    p = subparsers.add_parser("adapt", help=EXTERNAL_COMMANDS["adapt"].help)
    sub = p.add_subparsers(dest="adapt_env", required=True, metavar="{metaworld}")
    mw = sub.add_parser("metaworld", help="deployment adaptation on the novel tasks from a pre-trained checkpoint")
    train_cli.add_adapt_arguments(mw)
    mw.set_defaults(func=lambda args: _ran(train_cli.run_adapt(args)))
    return p


def _ran(_result: Any) -> int:
    return 0


# ``metacog run|pretrain|report <env> ...`` dispatch on the environment name: each table maps an
# environment to the "module:function" that adds its sub-parser (``function(subparsers)``).
# Another environment is one more line in the table(s) it supports.
RUN_ENVS: dict[str, str] = {
    "alfworld": "metacog_fast.agents.alfworld.cli:attach_run",
    "scienceworld": "metacog_fast.agents.scienceworld.cli:attach_run",
}
PRETRAIN_ENVS: dict[str, str] = {
    "alfworld": "metacog_fast.agents.alfworld.cli:attach_pretrain",
}
REPORT_ENVS: dict[str, str] = {
    "alfworld": "metacog_fast.agents.alfworld.cli:attach_report",
    "scienceworld": "metacog_fast.agents.scienceworld.cli:attach_report",
}


def _attach_env_table(name: str, table: dict[str, str], subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help=EXTERNAL_COMMANDS[name].help)
    sub = p.add_subparsers(dest=f"{name}_env", required=True, metavar="{" + ",".join(table) + "}")
    for target in table.values():
        module, func = target.split(":")
        getattr(importlib.import_module(module), func)(sub)
    return p


def _attach_run(subparsers: Any) -> argparse.ArgumentParser:
    return _attach_env_table("run", RUN_ENVS, subparsers)


def _attach_pretrain(subparsers: Any) -> argparse.ArgumentParser:
    return _attach_env_table("pretrain", PRETRAIN_ENVS, subparsers)


def _attach_report(subparsers: Any) -> argparse.ArgumentParser:
    return _attach_env_table("report", REPORT_ENVS, subparsers)


EXTERNAL_COMMANDS: dict[str, ExternalCommand] = {
    c.name: c
    for c in (
        ExternalCommand("sim", "town simulation of generative agents with metacognition (paper 001)",
                        "metacog_fast.sim.cli:add_arguments"),
        ExternalCommand("train", "train MUSE-WM / Dreamer-v3 on Meta-World (docs/design.md §3 protocol)",
                        "metacog_fast.cli.commands:_attach_train"),
        ExternalCommand("adapt", "adapt a pre-trained MUSE-WM / Dreamer-v3 to the novel Meta-World tasks",
                        "metacog_fast.cli.commands:_attach_adapt"),
        ExternalCommand("run", "run language agents on an environment (e.g. metacog run alfworld --agent muse)",
                        "metacog_fast.cli.commands:_attach_run"),
        ExternalCommand("pretrain", "pre-deployment of language agents (e.g. metacog pretrain alfworld)",
                        "metacog_fast.cli.commands:_attach_pretrain"),
        ExternalCommand("report", "tables, plots and costs of a language-agent run (metacog report alfworld RUN)",
                        "metacog_fast.cli.commands:_attach_report"),
        ExternalCommand("learn", "experience-memory agents learning on the job (metacog learn alfworld --iterations 3)",
                        "metacog_fast.agents.experience.cli:attach_learn"),
        ExternalCommand("finetune", "pre-deployment fine-tuning of the ALFWorld actor (metacog finetune data|sft|export|eval)",
                        "metacog_fast.finetune.cli:attach"),
        ExternalCommand("memory", "show, export or import experience memory (metacog memory show FILE)",
                        "metacog_fast.agents.experience.cli:attach_memory"),
    )
}
