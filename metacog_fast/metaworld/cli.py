"""``metacog train metaworld``, ``metacog adapt metaworld``, ``metacog train assess``, ``metacog train learn``
and ``metacog train learn-report``.

Flags come from :class:`~metacog_fast.metaworld.train.jobs.TrainJob`, :class:`~metacog_fast.metaworld.train.jobs.AdaptJob`
(each with :class:`~metacog_fast.runs.ExecutorConfig`: one harness task per agent) and
:class:`~metacog_fast.metaworld.train.assess.AssessConfig`.
"""
from __future__ import annotations

import argparse

from metacog_fast.cli.dataclass_args import Flags, add_config_flags, config_from_args
from metacog_fast.cli.executor import EXECUTOR_WORKERS_FLAGS
from metacog_fast.metaworld.train.assess import AssessConfig
from metacog_fast.metaworld.models.dreamer import PRECISIONS
from metacog_fast.metaworld.train.jobs import AdaptJob, TrainJob
from metacog_fast.metaworld.learn.config import LearnConfig, LearnJob, LearnModelConfig
from metacog_fast.metaworld.learn.report import LearnReportConfig
from metacog_fast.metaworld.learn.schedule import LearnSchedule

TRAIN_FLAGS = Flags(TrainJob)
ADAPT_FLAGS = Flags(AdaptJob, required=("checkpoint",))
ASSESS_FLAGS = Flags(AssessConfig, nargs={"checkpoint": "+", "names": "+"})
LEARN_FLAGS = Flags(LearnConfig)
LEARN_MODEL_FLAGS = Flags(LearnModelConfig, prefix="model_", choices={"precision": PRECISIONS},
                          only=("preset", "D", "Hd", "S", "C", "layers", "obs_mlp_layers", "obs_mlp_units", "E",
                                "horizon", "wm_lr", "ac_lr", "precision"))
LEARN_JOB_FLAGS = Flags(LearnJob)
LEARN_BASE_FLAGS = Flags(LearnConfig, skip=("task", "seed"))
SCHEDULE_FLAGS = Flags(LearnSchedule)
LEARN_REPORT_FLAGS = Flags(LearnReportConfig)


def _train(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.train.jobs import train_metaworld

    train_metaworld(config_from_args(TRAIN_FLAGS, a), config_from_args(EXECUTOR_WORKERS_FLAGS, a))
    return 0


def _adapt(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.train.jobs import adapt_metaworld

    adapt_metaworld(config_from_args(ADAPT_FLAGS, a), config_from_args(EXECUTOR_WORKERS_FLAGS, a))
    return 0


def _assess(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.train.assess import assess_checkpoints

    assess_checkpoints(config_from_args(ASSESS_FLAGS, a))
    return 0


def learn_configs(a: argparse.Namespace) -> tuple[LearnConfig, LearnJob]:
    """The LearnConfig (with its model) and LearnJob a ``metacog train learn`` command line spells."""
    model = config_from_args(LEARN_MODEL_FLAGS, a)
    return config_from_args(LEARN_FLAGS, a, model=model), config_from_args(LEARN_JOB_FLAGS, a)


def _learn(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.learn.run import learn_metaworld

    learn_metaworld(*learn_configs(a))
    return 0


def attach_learn(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train learn``."""
    add_config_flags(p, LEARN_FLAGS, LEARN_MODEL_FLAGS, LEARN_JOB_FLAGS)
    p.set_defaults(func=_learn)


def _learn_all(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.learn.schedule import run_schedule

    model = config_from_args(LEARN_MODEL_FLAGS, a)
    run_schedule(config_from_args(SCHEDULE_FLAGS, a), config_from_args(LEARN_BASE_FLAGS, a, model=model))
    return 0


def attach_learn_all(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train learn-all``."""
    add_config_flags(p, SCHEDULE_FLAGS, LEARN_BASE_FLAGS, LEARN_MODEL_FLAGS)
    p.set_defaults(func=_learn_all)


def _learn_report(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.learn.report import learn_report

    cfg = config_from_args(LEARN_REPORT_FLAGS, a)
    learn_report(cfg)
    print(f"learning curves written to {cfg.out}/learning_curves.png and learning_summary.json")
    return 0


def attach_learn_report(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train learn-report``."""
    add_config_flags(p, LEARN_REPORT_FLAGS)
    p.set_defaults(func=_learn_report)


def attach_train(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train metaworld``."""
    add_config_flags(p, TRAIN_FLAGS, EXECUTOR_WORKERS_FLAGS)
    p.set_defaults(func=_train)


def attach_adapt(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog adapt metaworld``."""
    add_config_flags(p, ADAPT_FLAGS, EXECUTOR_WORKERS_FLAGS)
    p.set_defaults(func=_adapt)


def attach_assess(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train assess``."""
    add_config_flags(p, ASSESS_FLAGS)
    p.set_defaults(func=_assess)
