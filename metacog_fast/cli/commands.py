"""Every ``metacog`` command, registered one way: a path, a help line, and ``"module:function"``.

``function(parser)`` fills the command's own (leaf) parser: its flags, read by tyro from the
command's dataclass (:func:`metacog_fast.cli.dataclass_args.add_command`), and ``func(args) -> int``.
Several entries can share a first word (``run alfworld``, ``run scienceworld``): the first word
becomes a parser whose sub-commands are the second words, with the help line of :data:`GROUPS`.

The modules behind most commands pull torch and models (seconds to import), so ``metacog --help``
and ``metacog info`` must not import them: until its command is chosen, each first word appears as
a stand-in sub-parser carrying only its help line, and only the chosen command's modules are loaded.
Another command is one more :class:`Command` line in :data:`COMMANDS`.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable

from metacog_fast._registry import resolve


@dataclass(frozen=True)
class Command:
    """One ``metacog`` command (or sub-command) whose parser is built by another module."""

    path: tuple[str, ...]
    """The words that name it: ``("sim",)``, ``("run", "alfworld")``."""
    help: str
    """Help line shown in ``metacog --help`` (without importing the module)."""
    attach: str
    """``"module:function"``; ``function(parser)`` adds the flags and sets ``func``."""

    def load(self) -> Callable[[argparse.ArgumentParser], Any]:
        return resolve(self.attach)


GROUPS: dict[str, str] = {
    "run": "run language agents on an environment (e.g. metacog run alfworld --agent muse)",
    "pretrain": "pre-deployment of language agents (e.g. metacog pretrain alfworld)",
    "report": "tables, plots and costs of a language-agent run (metacog report alfworld RUN)",
    "train": "train MUSE-WM / Dreamer-v3 on Meta-World (docs/design.md §3 protocol); assess checkpoints",
    "adapt": "adapt a pre-trained MUSE-WM / Dreamer-v3 to the novel Meta-World tasks",
}
"""Help lines of the first words that group several commands."""

COMMANDS: tuple[Command, ...] = (
    Command(("info",), "backends, versions, and which environments/data are usable",
            "metacog_fast.cli.commands:attach_info"),
    Command(("demo",), "drive each environment end to end with its expert; write figures as JSON",
            "metacog_fast.cli.commands:attach_demo"),
    Command(("sim",), "town simulation of generative agents with metacognition (paper 001)",
            "metacog_fast.town.cli:attach"),
    Command(("train", "metaworld"), "MUSE-WM / Dreamer-v3 pre-deployment + adaptation on Meta-World",
            "metacog_fast.metaworld.cli:attach_train"),
    Command(("train", "assess"), "the SA head of MUSE checkpoints on scripted-policy episodes (AUROC2)",
            "metacog_fast.metaworld.cli:attach_assess"),
    Command(("train", "learn"), "single-task Dreamer-v3 learning curve on one Meta-World task (resumable)",
            "metacog_fast.metaworld.cli:attach_learn"),
    Command(("train", "learn-all"), "several `train learn` runs (tasks x seeds), one at a time in rounds (resumable)",
            "metacog_fast.metaworld.cli:attach_learn_all"),
    Command(("train", "learn-report"), "learning curves of `train learn` runs beside the published DreamerV3 ones",
            "metacog_fast.metaworld.cli:attach_learn_report"),
    Command(("train", "export"), "a checkpoint's acting weights (fp16, ~5 MB, model.json) for MuseWMAgent.from_pretrained",
            "metacog_fast.metaworld.cli:attach_export"),
    Command(("train", "pack"), "a learning run packed small enough to commit (weights, bf16 moments, replay as actions)",
            "metacog_fast.metaworld.cli:attach_pack"),
    Command(("train", "unpack"), "a pack rebuilt into a run folder that `metacog train learn` resumes",
            "metacog_fast.metaworld.cli:attach_unpack"),
    Command(("adapt", "metaworld"), "deployment adaptation on the novel tasks from a pre-trained checkpoint",
            "metacog_fast.metaworld.cli:attach_adapt"),
    Command(("run", "alfworld"), "ALFWorld language agents (ReAct, Reflexion, MUSE, FCRF)",
            "metacog_fast.alfworld.cli:attach_run"),
    Command(("run", "scienceworld"), "ScienceWorld dual-process agent (baseline/amm/srm/full)",
            "metacog_fast.scienceworld.cli:attach_run"),
    Command(("pretrain", "alfworld"), "MUSE pre-deployment on ALFWorld (Reflexion data + M_sa training)",
            "metacog_fast.alfworld.cli:attach_pretrain"),
    Command(("report", "alfworld"), "tables, ROC plots and costs of ALFWorld agent runs",
            "metacog_fast.alfworld.cli:attach_report"),
    Command(("report", "alfworld-assessor"), "M_sa against trivial predictors (position, task-type prior, "
                                             "adaptation win rate) on ALFWorld MUSE runs' held-out games",
            "metacog_fast.alfworld.cli:attach_assessor_report"),
    Command(("report", "scienceworld"), "tables, mechanism counts and score chart of a ScienceWorld run",
            "metacog_fast.scienceworld.cli:attach_report"),
    Command(("report", "scienceworld-swift"), "which ScienceWorld Swift is better: a run's ranker vs the LLM, "
                                              "top-1 agreement with held-out gold steps",
            "metacog_fast.scienceworld.cli:attach_swift_eval"),
    Command(("learn",), "experience-memory agents learning on the job (metacog learn alfworld --iterations 3)",
            "metacog_fast.experience.cli:attach_learn"),
    Command(("memory",), "show, export or import experience memory (metacog memory show FILE)",
            "metacog_fast.experience.cli_memory:attach"),
    Command(("finetune",), "pre-deployment fine-tuning of the ALFWorld actor "
                           "(metacog finetune data|sft|export|eval|compare|reflections|dpo)",
            "metacog_fast.alfworld.cli_finetune:attach"),
    Command(("experiment",), "run an experiment file experiments/NAME.toml step by step, resumable "
                             "(metacog experiment run|list|show)", "metacog_fast.cli.experiment:attach"),
    Command(("serve",), "start/stop an OpenAI-compatible llama.cpp server on 127.0.0.1 (metacog serve start|stop)",
            "metacog_fast.cli.experiment:attach_serve"),
)


def top_level() -> dict[str, str]:
    """{first word: help line}, in the order of :data:`COMMANDS`."""
    out: dict[str, str] = {}
    for c in COMMANDS:
        out.setdefault(c.path[0], c.help if len(c.path) == 1 else GROUPS[c.path[0]])
    return out


def attach(sub: Any, word: str) -> argparse.ArgumentParser:
    """Build the full parser of first word ``word`` under ``sub`` (imports its modules)."""
    entries = [c for c in COMMANDS if c.path[0] == word]
    if len(entries) == 1 and len(entries[0].path) == 1:
        p = sub.add_parser(word, help=entries[0].help, description=entries[0].help)
        entries[0].load()(p)
        return p
    p = sub.add_parser(word, help=GROUPS[word], description=GROUPS[word])
    names = [c.path[1] for c in entries]
    inner = p.add_subparsers(dest=f"{word}_cmd", required=True, metavar="{" + ",".join(names) + "}")
    for c in entries:
        leaf = inner.add_parser(c.path[1], help=c.help, description=c.help)
        c.load()(leaf)
    return p


def attach_info(p: argparse.ArgumentParser) -> None:
    from metacog_fast.cli import info

    info.add_arguments(p)
    p.set_defaults(func=info.run)


def attach_demo(p: argparse.ArgumentParser) -> None:
    from metacog_fast.cli import demo

    demo.add_arguments(p)
    p.set_defaults(func=demo.run)
