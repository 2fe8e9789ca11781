"""``metacog learn alfworld|scienceworld``: experience-memory agents learning on the job.

The command line is a dataclass read by tyro (:mod:`metacog_fast.cli.dataclass_args`): views of
:class:`~metacog_fast.experience.protocols.ProtocolConfig` (what the run covers),
:class:`~metacog_fast.experience.config.ExperienceConfig` (the agents' knobs) and
:class:`~metacog_fast.runs.ExecutorConfig` (where the episodes run). (No ``from __future__ import
annotations``: the command dataclass is made in a function, its field types are the views made there.)
"""
import argparse
from dataclasses import dataclass
from typing import Any, Literal

from metacog_fast.cli import checks
from metacog_fast.cli.dataclass_args import ConfigError, add_command, build, parse, view
from metacog_fast.cli.executor import ExecutorWorkersFlags
from metacog_fast.experience.config import ExperienceConfig

PROTOCOLS = ("continuous", "transfer", "cross-model")
"""``--protocol``: which protocol function runs (transfer and cross-model share one)."""
DEFAULT_SPLITS = {"alfworld": "valid_seen", "scienceworld": "train"}
"""``--split`` when not given: it depends on the environment."""

ExperienceFlags = view(
    ExperienceConfig, skip=("use_memory", "learn"),  # set per condition by the protocols
    aliases={"episode_action_cap": ("--episode-actions",), "subtask_action_cap": ("--subtask-actions",),
             "action_grounding": ("--grounding",), "action_shortlist": ("--shortlist",),
             "subtask_as_command": ("--subtask-commands",)},
    negations={"show_strategic": ("--hide-strategic",)},
    choices={"action_grounding": ("choice", "embed", "choose")})
"""The agents' knobs (legacy spellings kept: ``--episode-actions``, ``--grounding``,
``--shortlist``, ``--no-subtask-commands``, ``--hide-strategic``, ``--no-loop-breaking``)."""


SPLITS = {"alfworld": ("train", "valid_seen", "valid_train", "valid_unseen"), "scienceworld": ("train", "dev", "test")}
"""The splits each environment has (``--split``)."""


def check_protocol(cfg: Any) -> None:
    """The run's values on their own, before any environment or model opens."""
    if isinstance(cfg.iterations, bool) or not isinstance(cfg.iterations, int) or cfg.iterations < 1:
        raise ValueError(f"iterations: expected an int >= 1, got {cfg.iterations!r}")


def protocol_flags() -> type:
    from metacog_fast.experience.protocols import ProtocolConfig

    return view(ProtocolConfig, positional=("env",), skip=("split",),
                aliases={"llm_uri": ("--llm",), "n_threads": ("--threads",)},
                choices={"env": tuple(DEFAULT_SPLITS), "embedder": ("hashing", "minilm")},
                checks={"llm_uri": checks.llm_uri, "n_threads": checks.positive_int,
                        "memory_in": checks.existing_file}, check=check_protocol)


def learn_command() -> type:
    """The command line of ``metacog learn``."""
    protocol_view = protocol_flags()

    @dataclass
    class LearnCommand:
        """Experience-memory agents learning on the job (metacog learn alfworld --iterations 3)."""

        run: protocol_view  # type: ignore[valid-type]
        experience: ExperienceFlags  # type: ignore[valid-type]
        executor: ExecutorWorkersFlags  # type: ignore[valid-type]
        split: str | None = None
        """Environment split (None: valid_seen for ALFWorld, train for ScienceWorld)."""
        protocol: Literal["continuous", "transfer", "cross-model"] = "continuous"
        """continuous learning (memory carried over iterations), transfer (frozen memory, other games) or
        cross-model (memory of one LLM used by another)."""

    return LearnCommand


def parse_games(text: str, env: str) -> list[str]:
    """``"0,5,10-12"`` -> ALFWorld game indices (ranges expanded); ScienceWorld ``"task:var,..."`` as given."""
    out: list[str] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if env == "alfworld" and "-" in part:
            a, b = part.split("-", 1)
            if not (a.isdigit() and b.isdigit()) or int(b) < int(a):
                raise ValueError(f"--games: bad range {part!r} (expected e.g. 10-12)")
            out += [str(i) for i in range(int(a), int(b) + 1)]
        else:
            out.append(part)
    if not out:
        raise ValueError("--games: no game given")
    return out


def attach_learn(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog learn``."""
    add_command(p, learn_command())
    p.set_defaults(func=run_learn)


def learn_configs(a: argparse.Namespace):
    """(ProtocolConfig, ExperienceConfig, ExecutorConfig, protocol name) of a ``metacog learn`` command line."""
    cmd = parse(a)
    try:
        games = parse_games(",".join(cmd.run.games), cmd.run.env)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    split = cmd.split or DEFAULT_SPLITS[cmd.run.env]
    if split not in SPLITS[cmd.run.env]:  # --split is the command's flag (its default depends on env)
        raise ConfigError(f"--split: {cmd.run.env} has the splits {', '.join(SPLITS[cmd.run.env])}, got {split!r}")
    cfg = build(cmd.run, split=split, games=games)
    return cfg, build(cmd.experience), build(cmd.executor), cmd.protocol


def run_learn(a: argparse.Namespace) -> int:
    cfg, exp, executor, protocol = learn_configs(a)
    from metacog_fast.experience import protocols as pt

    run = pt.continuous_learning if protocol == "continuous" else pt.transfer
    m = run(cfg, exp, executor=executor)
    for r in m["rows"]:
        print(f"{r['condition']:>9} it{r['iteration']}: success {r['success_rate']:.2f} score {r['mean_score']:.2f} "
              f"subtask {r['subtask_success']:.2f} tokens/task {r['tokens_per_task']:.0f}")
    print(f"results in {cfg.out}")
    return 0
