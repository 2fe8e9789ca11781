"""``metacog run alfworld``, ``metacog pretrain alfworld``, ``metacog report alfworld <run>``.

``attach_run`` / ``attach_pretrain`` / ``attach_report`` add the ``alfworld`` sub-parser to the
environment-dispatching commands of :mod:`metacog_fast.cli.commands`.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from metacog_fast.agents.alfworld.config import AGENT_NAMES, MAP_MODES, AgentConfig, RunConfig


def _agent_args(p: argparse.ArgumentParser) -> None:
    d = AgentConfig()
    p.add_argument("--max-steps", type=int, default=d.max_steps, help=f"env steps per episode (default {d.max_steps})")
    p.add_argument("--map-actions", choices=MAP_MODES, default=d.map_actions,
                   help=f"admissible-action mapping (default {d.map_actions})")
    p.add_argument("--rollouts", type=int, default=d.rollouts, help=f"MUSE rollouts per step (default {d.rollouts})")
    p.add_argument("--rollout-max-tokens", type=int, default=d.rollout_max_tokens,
                   help=f"tokens per MUSE rollout (default {d.rollout_max_tokens})")
    p.add_argument("--examples", type=int, default=d.examples,
                   help=f"few-shot examples of the task type in the prompt (default {d.examples})")
    p.add_argument("--seed", type=int, default=d.seed, help="sampling seed (default 0)")
    p.add_argument("--llm", default=None, help="LLM URI (default: $METACOG_LLM, then embedded SmolLM2)")
    p.add_argument("--n-threads", type=int, default=1, help="llama.cpp threads per worker (default 1)")
    p.add_argument("--n-ctx", type=int, default=RunConfig.n_ctx,
                   help=f"LLM context window in tokens (default {RunConfig.n_ctx}, SmolLM2's trained context; "
                        "a 50-step ReAct prompt with 2 examples needs ~4.5k)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--data", default=None, help="ALFWorld data folder")
    p.add_argument("--fewshot", default=None, help="few-shot cache JSON (default results/alfworld/fewshot.json)")


def _agent_config(a: argparse.Namespace) -> AgentConfig:
    return AgentConfig(max_steps=a.max_steps, map_actions=a.map_actions, rollouts=a.rollouts, examples=a.examples,
                       rollout_max_tokens=a.rollout_max_tokens, seed=a.seed).validate()


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", choices=AGENT_NAMES, required=True)
    p.add_argument("--split", default="valid_train", help="split folder (default valid_train)")
    p.add_argument("--tasks", type=int, default=12, help="games, round-robin over task types (default 12)")
    p.add_argument("--adapt-episodes", type=int, default=5, help="adaptation episodes per game (default 5)")
    p.add_argument("--episodes", "--test-episodes", dest="test_episodes", type=int, default=5,
                   help="test episodes per game (default 5)")
    p.add_argument("--scorer", default=None, help="pre-deployment scorer folder (MUSE agents)")
    p.add_argument("--out", required=True, help="run folder (resumed when it exists)")
    _agent_args(p)


def run_config(a: argparse.Namespace) -> RunConfig:
    """The RunConfig of parsed ``metacog run alfworld`` arguments."""
    return RunConfig(agent=a.agent, split=a.split, data=a.data, tasks=a.tasks, adapt_episodes=a.adapt_episodes,
                     test_episodes=a.test_episodes, scorer=a.scorer, llm=a.llm, n_threads=a.n_threads,
                     n_ctx=a.n_ctx, workers=a.workers, agent_config=_agent_config(a))


def run_cmd(a: argparse.Namespace) -> int:
    from metacog_fast.agents.alfworld.protocol import DEFAULT_FEWSHOT, run_protocol

    res = run_protocol(a.out, run_config(a), a.fewshot or DEFAULT_FEWSHOT)
    print(json.dumps(res))
    return 0


def add_pretrain_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", default="valid_seen", help="pre-deployment split (default valid_seen)")
    p.add_argument("--tasks", type=int, default=6, help="games (default 6)")
    p.add_argument("--episodes", type=int, default=2, help="Reflexion episodes per game (default 2)")
    p.add_argument("--no-expert-positives", action="store_true",
                   help="do not add expert walkthrough chunks as positives")
    p.add_argument("--epochs", type=int, default=None, help="M_sa training epochs (default: ScorerConfig)")
    p.add_argument("--train-only", action="store_true",
                   help="skip collection; train M_sa on the episodes already recorded under OUT/collect")
    p.add_argument("--out", required=True, help="output folder (collect/, scorer/, pretrain.json)")
    _agent_args(p)


def pretrain_cmd(a: argparse.Namespace) -> int:
    from metacog_fast.agents.alfworld.protocol import DEFAULT_FEWSHOT, pretrain

    facts = pretrain(a.out, games=a.tasks, episodes=a.episodes, split=a.split, data=a.data,
                     expert_positives=not a.no_expert_positives, agent_config=_agent_config(a), llm=a.llm,
                     n_threads=a.n_threads, workers=a.workers, epochs=a.epochs, fewshot=a.fewshot or DEFAULT_FEWSHOT,
                     train_only=a.train_only, n_ctx=a.n_ctx)
    print(json.dumps(facts))
    return 0


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a run folder, or a folder holding several (one per agent)")
    p.add_argument("--out", default=None, help="where report.json, tables.md and plots go (default: the run)")


def report_cmd(a: argparse.Namespace) -> int:
    from metacog_fast.agents.alfworld.report import report

    report(a.run, a.out)
    out = a.out or a.run
    with open(f"{out}/tables.md") as f:
        print(f.read())
    return 0


def attach_run(sub: Any) -> None:
    """Adds ``alfworld`` under ``metacog run``."""
    p = sub.add_parser("alfworld", help="ALFWorld language agents (ReAct, Reflexion, MUSE, FCRF)")
    add_run_arguments(p)
    p.set_defaults(func=run_cmd)


def attach_pretrain(sub: Any) -> None:
    p = sub.add_parser("alfworld", help="MUSE pre-deployment on ALFWorld (Reflexion data + M_sa training)")
    add_pretrain_arguments(p)
    p.set_defaults(func=pretrain_cmd)


def attach_report(sub: Any) -> None:
    p = sub.add_parser("alfworld", help="tables, ROC plots and costs of ALFWorld agent runs")
    add_report_arguments(p)
    p.set_defaults(func=report_cmd)
