"""``metacog train metaworld``, ``metacog adapt metaworld``, ``metacog train assess``, ``metacog train learn``,
``metacog train learn-all`` and ``metacog train learn-report``.

Each command line is a dataclass read by tyro (:mod:`metacog_fast.cli.dataclass_args`): views of
:class:`~metacog_fast.metaworld.train.jobs.TrainJob`, :class:`~metacog_fast.metaworld.train.jobs.AdaptJob`
(each with :class:`~metacog_fast.runs.ExecutorConfig`: one harness task per agent),
:class:`~metacog_fast.metaworld.train.assess.AssessConfig` and the ``learn`` configurations.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from metacog_fast.cli.dataclass_args import add_command, build, parse, view
from metacog_fast.cli.executor import ExecutorWorkersFlags
from metacog_fast.metaworld.learn.config import LearnConfig, LearnJob, LearnModelConfig
from metacog_fast.metaworld.learn.report import LearnReportConfig
from metacog_fast.metaworld.learn.schedule import LearnSchedule
from metacog_fast.metaworld.models.dreamer import PRECISIONS
from metacog_fast.metaworld.train.assess import AssessConfig
from metacog_fast.metaworld.train.jobs import AdaptJob, TrainJob

_MODEL_FIELDS = ("preset", "D", "Hd", "S", "C", "layers", "obs_mlp_layers", "obs_mlp_units", "E", "horizon", "wm_lr",
                 "ac_lr", "precision")
TrainFlags = view(TrainJob)
AdaptFlags = view(AdaptJob, required=("checkpoint",))
AssessFlags = view(AssessConfig, spaced=("checkpoint", "names"))
LearnModelFlags = view(LearnModelConfig, only=_MODEL_FIELDS, choices={"precision": PRECISIONS},
                       names={f: f"model_{f}" for f in _MODEL_FIELDS})
"""The model of a ``learn`` run: ``--model-precision``, ``--model-D``, ..."""
LearnFlags = view(LearnConfig, nested={"model": LearnModelFlags})
LearnJobFlags = view(LearnJob)
LearnBaseFlags = view(LearnConfig, skip=("task", "seed"), nested={"model": LearnModelFlags})
"""What every run of ``learn-all`` shares (its schedule names the tasks and seeds)."""
ScheduleFlags = view(LearnSchedule)
LearnReportFlags = view(LearnReportConfig)


@dataclass
class TrainCommand:
    """MUSE-WM / Dreamer-v3 pre-deployment + adaptation on Meta-World."""

    job: TrainFlags
    executor: ExecutorWorkersFlags


@dataclass
class AdaptCommand:
    """Deployment adaptation on the novel tasks from a pre-trained checkpoint."""

    job: AdaptFlags
    executor: ExecutorWorkersFlags


@dataclass
class AssessCommand:
    """The SA head of MUSE checkpoints on scripted-policy episodes (AUROC2)."""

    assess: AssessFlags


@dataclass
class LearnCommand:
    """Single-task Dreamer-v3 learning curve on one Meta-World task (resumable)."""

    learn: LearnFlags
    job: LearnJobFlags


@dataclass
class LearnAllCommand:
    """Several `train learn` runs (tasks x seeds), one at a time in rounds (resumable)."""

    schedule: ScheduleFlags
    learn: LearnBaseFlags


@dataclass
class LearnReportCommand:
    """Learning curves of `train learn` runs beside the published DreamerV3 ones."""

    report: LearnReportFlags


def _train(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.train.jobs import train_metaworld

    cmd = parse(a, TrainCommand)
    train_metaworld(build(cmd.job), build(cmd.executor))
    return 0


def _adapt(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.train.jobs import adapt_metaworld

    cmd = parse(a, AdaptCommand)
    adapt_metaworld(build(cmd.job), build(cmd.executor))
    return 0


def _assess(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.train.assess import assess_checkpoints

    assess_checkpoints(build(parse(a, AssessCommand).assess))
    return 0


def learn_configs(a: argparse.Namespace) -> tuple[LearnConfig, LearnJob]:
    """The LearnConfig (with its model) and LearnJob a ``metacog train learn`` command line spells."""
    cmd = parse(a, LearnCommand)
    return build(cmd.learn), build(cmd.job)


def _learn(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.learn.run import learn_metaworld

    learn_metaworld(*learn_configs(a))
    return 0


def _learn_all(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.learn.schedule import run_schedule

    cmd = parse(a, LearnAllCommand)
    run_schedule(build(cmd.schedule), build(cmd.learn))
    return 0


def _learn_report(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.learn.report import learn_report

    cfg = build(parse(a, LearnReportCommand).report)
    learn_report(cfg)
    print(f"learning curves written to {cfg.out}/learning_curves.png and learning_summary.json")
    return 0


def _attach(p: argparse.ArgumentParser, command: type, func) -> None:
    add_command(p, command)
    p.set_defaults(func=func)


def attach_train(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train metaworld``."""
    _attach(p, TrainCommand, _train)


def attach_adapt(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog adapt metaworld``."""
    _attach(p, AdaptCommand, _adapt)


def attach_assess(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train assess``."""
    _attach(p, AssessCommand, _assess)


def attach_learn(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train learn``."""
    _attach(p, LearnCommand, _learn)


def attach_learn_all(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train learn-all``."""
    _attach(p, LearnAllCommand, _learn_all)


def attach_learn_report(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train learn-report``."""
    _attach(p, LearnReportCommand, _learn_report)
