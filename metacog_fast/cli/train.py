"""``metacog train metaworld``, ``metacog adapt metaworld`` and ``metacog train assess``.

Flags come from :class:`~metacog_fast.train.jobs.TrainJob`, :class:`~metacog_fast.train.jobs.AdaptJob`
(each with :class:`~metacog_fast.runs.ExecutorConfig`: one harness task per agent) and
:class:`~metacog_fast.train.assess.AssessConfig`.
"""
from __future__ import annotations

import argparse

from metacog_fast.cli.dataclass_args import Flags, add_config_flags, config_from_args
from metacog_fast.cli.executor import EXECUTOR_WORKERS_FLAGS
from metacog_fast.train.assess import AssessConfig
from metacog_fast.train.jobs import AdaptJob, TrainJob

TRAIN_FLAGS = Flags(TrainJob)
ADAPT_FLAGS = Flags(AdaptJob, required=("checkpoint",))
ASSESS_FLAGS = Flags(AssessConfig, nargs={"checkpoint": "+", "names": "+"})


def _train(a: argparse.Namespace) -> int:
    from metacog_fast.train.jobs import train_metaworld

    train_metaworld(config_from_args(TRAIN_FLAGS, a), config_from_args(EXECUTOR_WORKERS_FLAGS, a))
    return 0


def _adapt(a: argparse.Namespace) -> int:
    from metacog_fast.train.jobs import adapt_metaworld

    adapt_metaworld(config_from_args(ADAPT_FLAGS, a), config_from_args(EXECUTOR_WORKERS_FLAGS, a))
    return 0


def _assess(a: argparse.Namespace) -> int:
    from metacog_fast.train.assess import assess_checkpoints

    assess_checkpoints(config_from_args(ASSESS_FLAGS, a))
    return 0


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
