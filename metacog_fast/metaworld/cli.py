"""``metacog train metaworld``, ``metacog adapt metaworld``, ``metacog train assess``, ``metacog train learn``,
``metacog train learn-all``, ``metacog train learn-report``, ``metacog train export``, ``metacog train pack``
and ``metacog train unpack``.

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
from metacog_fast.metaworld.learn.pack import MOMENTS, PackConfig, UnpackConfig
from metacog_fast.metaworld.learn.report import LearnReportConfig
from metacog_fast.metaworld.learn.schedule import LearnSchedule
from metacog_fast.metaworld.models.dreamer import PRECISIONS
from metacog_fast.metaworld.muse_wm.export import PRECISIONS as EXPORT_PRECISIONS
from metacog_fast.metaworld.muse_wm.export import ExportConfig, check_source
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
PackFlags = view(PackConfig, positional=("run_dir",), required=("run_dir", "out"), choices={"moments": MOMENTS})
UnpackFlags = view(UnpackConfig, positional=("pack",), required=("pack", "run_dir"))
ExportFlags = view(ExportConfig, positional=("source",), required=("source", "out"),
                   choices={"precision": EXPORT_PRECISIONS}, checks={"source": check_source})


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


@dataclass
class ExportCommand:
    """A checkpoint's acting weights (fp16, ~5 MB, with model.json) for MuseWMAgent.from_pretrained."""

    export: ExportFlags


def _export(a: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from metacog_fast.metaworld.learn.records import eval_key
    from metacog_fast.metaworld.muse_wm.checkpoint import resolve_checkpoint
    from metacog_fast.metaworld.muse_wm.export import export_acting

    cfg = build(parse(a, ExportCommand).export)
    stem = resolve_checkpoint(cfg.source)
    measured = None
    if Path(cfg.source).is_dir() and stem.with_suffix(".json").exists():
        # a learning run: the evaluation taken at the checkpoint's own env step measured these weights
        steps = json.loads(stem.with_suffix(".json").read_text()).get("meta", {}).get("env_steps")
        rec = Path(cfg.source) / f"{eval_key(steps)}.json" if isinstance(steps, int) else None
        if rec is not None and rec.is_file():
            ev = json.loads(rec.read_text())
            measured = {k: ev[k] for k in ("task", "env_steps", "n", "success", "final_success", "return_mean") if k in ev}
            measured["record"] = str(rec)
    out = export_acting(cfg.source, cfg.out, cfg.precision, measured=measured, name=cfg.name)
    doc = json.loads(out.read_text())
    print(f"{out.parent}: {doc['parameters']:,} parameters, {doc['bytes'] / 1e6:.1f} MB ({doc['precision']}); "
          f"measured: {'none recorded' if measured is None else measured.get('final_success')}")
    return 0


@dataclass
class PackCommand:
    """A learning run packed small enough to commit (weights, bf16 moments, replay as actions + seeds)."""

    pack: PackFlags


@dataclass
class UnpackCommand:
    """A pack rebuilt into a run folder that `metacog train learn` resumes."""

    unpack: UnpackFlags


def _pack(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.learn.pack import pack_run

    cfg = build(parse(a, PackCommand).pack)
    man = pack_run(cfg.run_dir, cfg.out, cfg.moments, progress=cfg.progress)
    size = (man["state"]["bytes"] + man["replay"]["bytes"]) / 1e6
    print(f"{cfg.out}: {man['meta'].get('env_steps')} env steps, {man['replay']['episodes']} episodes, {size:.1f} MB "
          f"({len(man['replay']['stored_in_full'])} episodes stored in full)")
    return 0


def _unpack(a: argparse.Namespace) -> int:
    from metacog_fast.metaworld.learn.pack import unpack_run

    cfg = build(parse(a, UnpackCommand).unpack)
    rep = unpack_run(cfg.pack, cfg.run_dir, progress=cfg.progress)
    print(f"{cfg.run_dir}: {rep['episodes']} episodes ({rep['resimulated']} re-simulated, "
          f"{len(rep['mismatched'])} differing from their digest); resume with `metacog train learn --run-dir "
          f"{cfg.run_dir}` and the run's flags")
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


def attach_export(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train export``."""
    _attach(p, ExportCommand, _export)


def attach_pack(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train pack``."""
    _attach(p, PackCommand, _pack)


def attach_unpack(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog train unpack``."""
    _attach(p, UnpackCommand, _unpack)
