"""What ``metacog train metaworld`` and ``metacog adapt metaworld`` run, as plain functions of
configuration dataclasses: the whole protocol (pre-deployment + adaptation) per agent and its
report, or the adaptation of a pre-trained checkpoint. Each agent's protocol is one task of the run
harness (``train.tasks.run_agents``), so agents train in parallel on any executor."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from metacog_fast.metaworld.muse_wm.config import ActConfig
from metacog_fast.runs.config import ExecutorConfig
from metacog_fast.metaworld.train.config import ProtocolConfig, profile

PROFILES = ("cpu", "smoke", "paper")
"""Names :func:`metacog_fast.metaworld.train.config.profile` knows."""


@dataclass
class MetaWorldJob:
    """The settings both Meta-World jobs put on top of a profile."""

    seed: int = ProtocolConfig.seed
    """Run seed (layouts, noise, initialisation)."""
    sr_z: Literal["prior", "posterior"] = ActConfig.sr_z  # type: ignore[assignment]
    """z_t for self-regulation: prior (Algorithm 1 as printed) or posterior."""
    backend: str = ActConfig.backend
    """Acting kernel backend (auto, cpu, torch, ...)."""
    threads: int = ProtocolConfig.torch_threads
    """torch threads."""

    def protocol(self, profile_name: str, agent: str, **overrides: Any) -> ProtocolConfig:
        """The profile's ProtocolConfig for ``agent`` with this job's settings."""
        cfg = profile(profile_name, agent=agent, seed=self.seed, torch_threads=self.threads, **overrides)
        cfg.act.sr_z = self.sr_z
        cfg.act.backend = self.backend
        cfg.__post_init__()
        return cfg


@dataclass
class TrainJob(MetaWorldJob):
    """``metacog train metaworld``: pre-deployment + adaptation of one or both agents, then the report."""

    profile: Literal["cpu", "smoke", "paper"] = "cpu"
    """Budget profile (``train.config.profile``): cpu (about an hour on 2 cores), smoke (minutes), paper."""
    agent: Literal["muse", "dreamer", "both"] = "both"
    """Agent(s) to train."""
    run_dir: str | None = None
    """Run folder (None: runs/metaworld/<profile>); resumed if present."""
    out: str | None = None
    """Report folder (None: results/metaworld/<profile>)."""


@dataclass
class AdaptJob(MetaWorldJob):
    """``metacog adapt metaworld``: deployment adaptation on the novel tasks from a pre-trained checkpoint."""

    checkpoint: str = ""
    """Pre-trained checkpoint stem (e.g. runs/metaworld/cpu/muse/pretrained)."""
    agent: Literal["muse", "dreamer"] = "muse"
    """Agent of the checkpoint."""
    profile: Literal["cpu", "smoke", "paper"] | None = None
    """Profile for the adaptation settings (None: the checkpoint's)."""
    run_dir: str | None = None
    """Run folder (None: <checkpoint dir>/adapt_<agent>)."""
    out: str | None = None
    """Report folder (None: <run-dir>/report)."""

    def validate(self) -> "AdaptJob":
        if not self.checkpoint:
            raise ValueError("checkpoint: expected a pre-trained checkpoint stem")
        return self


def _label(agent: str) -> str:
    return "MUSE" if agent == "muse" else "Dreamer-v3"


def train_metaworld(job: TrainJob, executor: ExecutorConfig | None = None) -> dict[str, Any]:
    """Pre-deployment + adaptation for the chosen agent(s) (``job.run_dir/<agent>``, resumed), one
    harness task per agent on ``executor``, then the report (JSON, CSV, Table 1, plots) in
    ``job.out``. Returns the results."""
    from metacog_fast.metaworld.train.report import write_report
    from metacog_fast.metaworld.train.tasks import run_agents

    run_root = Path(job.run_dir or f"runs/metaworld/{job.profile}")
    agents = ("muse", "dreamer") if job.agent == "both" else (job.agent,)
    cfgs = {agent: job.protocol(job.profile, agent) for agent in agents}
    run_agents(run_root, cfgs, executor)
    runs = {_label(agent): (run_root / agent, cfg) for agent, cfg in cfgs.items()}
    out = Path(job.out or f"results/metaworld/{job.profile}")
    results = write_report(runs, out)
    print((out / "table1.md").read_text())
    print(f"report written to {out}")
    return results


def adapt_metaworld(job: AdaptJob, executor: ExecutorConfig | None = None) -> dict[str, Any]:
    """Adaptation on the novel tasks from ``job.checkpoint`` (a harness task on ``executor``), then the report."""
    from metacog_fast.metaworld.train.checkpoint import read_config
    from metacog_fast.metaworld.train.report import write_report
    from metacog_fast.metaworld.train.tasks import run_agents

    stem = Path(job.checkpoint)
    if stem.suffix in (".json", ".safetensors"):
        stem = stem.with_suffix("")
    saved, _ = read_config(stem)
    cfg = job.protocol(job.profile or saved.profile, job.agent, model=saved.model)
    rd = Path(job.run_dir or stem.parent / f"adapt_{job.agent}")
    run_agents(rd.parent, {rd.name: cfg}, executor, pretrained=stem)
    out = Path(job.out or rd / "report")
    results = write_report({_label(job.agent): (rd, cfg)}, out)
    print((out / "table1.md").read_text())
    return results
