"""``metacog learn alfworld|scienceworld``: experience-memory agents learning on the job.

Flags come from :class:`~metacog_fast.experience.protocols.ProtocolConfig` (what the run
covers), :class:`~metacog_fast.experience.config.ExperienceConfig` (the agents' knobs) and
:class:`~metacog_fast.runs.ExecutorConfig` (where the episodes run).
"""
from __future__ import annotations

import argparse

from metacog_fast.experience.config import ExperienceConfig
from metacog_fast.cli.dataclass_args import ConfigError, Flags, add_config_flags, config_from_args
from metacog_fast.cli.executor import EXECUTOR_WORKERS_FLAGS

PROTOCOLS = ("continuous", "transfer", "cross-model")
"""``--protocol``: which protocol function runs (transfer and cross-model share one)."""
DEFAULT_SPLITS = {"alfworld": "valid_seen", "scienceworld": "train"}
"""``--split`` when not given: it depends on the environment."""

EXPERIENCE_FLAGS = Flags(
    ExperienceConfig, skip=("use_memory", "learn"),  # set per condition by the protocols
    aliases={"episode_action_cap": ("--episode-actions",), "subtask_action_cap": ("--subtask-actions",),
             "action_grounding": ("--grounding",), "action_shortlist": ("--shortlist",),
             "subtask_as_command": ("--subtask-commands",)},
    negations={"show_strategic": ("--hide-strategic",)},
    choices={"action_grounding": ("choice", "embed", "choose")})
"""The agents' knobs (legacy spellings kept: ``--episode-actions``, ``--grounding``,
``--shortlist``, ``--no-subtask-commands``, ``--hide-strategic``, ``--no-loop-breaking``)."""


def protocol_flags() -> Flags:
    from metacog_fast.experience.protocols import ProtocolConfig

    return Flags(ProtocolConfig, positional=("env",), skip=("split",),
                 aliases={"llm_uri": ("--llm",), "n_threads": ("--threads",)},
                 choices={"env": tuple(DEFAULT_SPLITS), "embedder": ("hashing", "minilm")})


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
    add_config_flags(p, protocol_flags())
    p.add_argument("--split", default=None, help="environment split (default: valid_seen for ALFWorld, "
                                                 "train for ScienceWorld)")
    p.add_argument("--protocol", choices=PROTOCOLS, default=PROTOCOLS[0],
                   help="continuous learning (memory carried over iterations), transfer (frozen memory, "
                        "other games) or cross-model (memory of one LLM used by another)")
    add_config_flags(p, EXPERIENCE_FLAGS, EXECUTOR_WORKERS_FLAGS)
    p.set_defaults(func=run_learn)


def run_learn(a: argparse.Namespace) -> int:
    spec = protocol_flags()
    raw = config_from_args(spec, a)
    try:
        games = parse_games(",".join(raw.games), raw.env)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    cfg = config_from_args(spec, a, split=a.split or DEFAULT_SPLITS[raw.env], games=games)
    if cfg.iterations < 1:
        raise ConfigError(f"--iterations: expected >= 1, got {cfg.iterations}")
    exp = config_from_args(EXPERIENCE_FLAGS, a)
    executor = config_from_args(EXECUTOR_WORKERS_FLAGS, a)
    from metacog_fast.experience import protocols as pt

    run = pt.continuous_learning if a.protocol == "continuous" else pt.transfer
    m = run(cfg, exp, executor=executor)
    for r in m["rows"]:
        print(f"{r['condition']:>9} it{r['iteration']}: success {r['success_rate']:.2f} score {r['mean_score']:.2f} "
              f"subtask {r['subtask_success']:.2f} tokens/task {r['tokens_per_task']:.0f}")
    print(f"results in {cfg.out}")
    return 0
