"""``metacog demo --parts alfworld_muse``: one MUSE episode on an ALFWorld game, printing each
step's candidate rollouts with their competence scores M_sa.

The actor is the fine-tuned model that ships in the package (``finetuned:alfworld``, its own
prompt setting from its model.json) unless ``--alfworld-muse-llm`` names another; the output says
which model it was and what that model measured.

Without ``--alfworld-muse-scorer`` the scorer is the one that ships beside the actor (fitted on the
actor's own recorded episodes, :mod:`metacog_fast.alfworld.finetune.scorer`); for an actor without one, a
scorer is fitted on the spot on expert walkthrough chunks of two ``valid_train`` games (positives)
and on chunks of repeated ``look`` / ``inventory`` (negatives). The output says which.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from metacog_fast.cli.demo_registry import (DemoPart, PositiveInt, ProgressFactory, expert_summary, model_info,
                                              expert_policy, register_demo_part)
from metacog_fast.envs.base import Env
from metacog_fast.envs.driver import Step, play


# -- the environment checked with its expert (runs under --quick) ----------------------------

@dataclass
class AlfworldDemo:
    """``--parts alfworld``: games played by their walkthroughs."""

    games: PositiveInt = 6
    """Games, one task type after the other (6: one per type)."""
    split: str = "valid_seen"
    """Split folder."""
    data: str | None = None
    """Data folder (None: $ALFWORLD_DATA or <repo>/data/alfworld)."""


def _round_robin_by_type(games: list[Any], n: int) -> list[int]:
    """Indices of ``n`` games taking each task type in turn, so that every type shows up."""
    from metacog_fast.alfworld.env import task_type_of

    by_type: dict[str, list[int]] = {}
    for i, g in enumerate(games):
        by_type.setdefault(task_type_of(g), []).append(i)
    queues = [list(v) for _, v in sorted(by_type.items())]
    picks: list[int] = []
    while len(picks) < min(n, len(games)):
        for q in queues:
            if q and len(picks) < n:
                picks.append(q.pop(0))
    return picks


def _aw_run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.alfworld.env import AlfWorldEnv, AlfWorldConfig

    wall0 = time.perf_counter()
    env = AlfWorldEnv(AlfWorldConfig(split=args.alfworld_split, data=args.alfworld_data))
    picks = _round_robin_by_type(env.games, args.alfworld_games)
    episodes: list[dict[str, Any]] = []
    bar = progress(total=len(picks), desc="alfworld")
    for idx in picks:
        info = play(env, expert_policy(env), None, reset_kwargs={"game": idx}).info
        reset_s = env.timings.last_reset_seconds
        episodes.append(
            {"game": idx, "task_type": info["task_type"], "task": info["task"], "success": info["won"],
             "steps": info["steps"], "reset_seconds": reset_s}
        )
        bar.update(1)
        bar.set_postfix_str(f"{info['task_type']}: {'won' if info['won'] else 'lost'}")
    bar.close()
    # A second reset of the last game shows what the cache saves.
    env.reset(game=picks[-1])
    cached = env.timings.last_reset_seconds
    out = expert_summary([env], episodes, time.perf_counter() - wall0, "ALFWorld expert walkthroughs")
    out["first_reset_seconds_mean"] = sum(e["reset_seconds"] for e in episodes) / len(episodes)
    out["cached_reset_seconds"] = cached
    out["split"] = args.alfworld_split
    env.close()
    return out


register_demo_part(DemoPart("alfworld", "ALFWorld games played by their walkthroughs", AlfworldDemo, _aw_run, needs=("alfworld",), quick=True))


# -- the agent ---------------------------------------------------------------------------


@dataclass
class AlfworldMuseDemo:
    """``--parts alfworld_muse``: one MUSE episode."""

    scorer: str | None = None
    """Pre-deployment scorer folder (None: the scorer that ships with the actor; without one, a quick
    expert-walkthrough scorer fitted on the spot)."""
    split: str = "valid_seen"
    """Split (valid_seen: games neither the actor nor its scorer was trained on)."""
    game: int = 0
    """Game index in the round-robin order."""
    steps: int = 8
    """Episode steps."""
    rollouts: int = 5
    """Rollouts per step."""
    llm: str = "finetuned:alfworld"
    """Actor LLM URI (finetuned:alfworld: the shipped fine-tuned SmolLM2; 'llama-cpp://' for the base model)."""


def _actor(uri: str, seed: int) -> tuple[Any, int, str, str | None]:
    """(llm, few-shot examples, a line saying what the actor is, the folder of the scorer that ships
    with it or None) for ``uri``."""
    from pathlib import Path

    from metacog_fast.llm import open_llm
    from metacog_fast.llm.models import list_named_models, resolve_named_model

    info, scorer = None, None
    if uri.startswith("finetuned:"):
        name = uri.split(":", 1)[1].lstrip("/")
        info = resolve_named_model(name).info or {}
        folder = Path(list_named_models()[name]) / "scorer"
        scorer = str(folder) if (folder / "config.json").is_file() else None
    llm = open_llm(uri, n_threads=1, n_ctx=4096, seed=seed)
    if info is None:
        return llm, 2, f"{uri} (not fine-tuned; 2 few-shot examples)", None
    examples = int(info.get("prompt", {}).get("examples", 2))
    ev = (info.get("evaluation") or {}).get("success")
    measured = (f"; measured {ev['successes']}/{ev['n']} = {100 * ev['rate']:.1f} % "
                f"[{100 * ev['low']:.1f}, {100 * ev['high']:.1f}] as ReAct on valid_train") if ev else ""
    return llm, examples, f"{uri}: {info.get('description', 'a fine-tuned model')}{measured}", scorer


def _scorer_origin(folder: str) -> str:
    """What a scorer folder was trained on and how it measured (its scorer.json), in one line."""
    import json
    from pathlib import Path

    meta = Path(folder) / "scorer.json"
    if not meta.is_file():
        return folder
    rep = json.loads(meta.read_text())
    t, cv = rep.get("trained_on", {}), rep.get("crossval", {})
    auroc = f"; AUROC2 on held-out games {cv['chunk_auroc2_text']}" if cv.get("chunk_auroc2_text") else ""
    return (f"shipped with the actor: fitted on its own {t.get('episodes')} valid_train episodes "
            f"({t.get('won_episodes')} won, {t.get('games')} games){auroc}")


def _quick_scorer() -> tuple[Any, str]:
    from metacog_fast.alfworld.protocol import expert_examples, select_games
    from metacog_fast.scoring import ScorerConfig, TrajectoryScorer

    games = select_games("valid_train", 2)  # not the demo's split
    pos = expert_examples(games, "valid_train", None)
    neg = [{"task": e["task"], "plan": e["plan"], "label": 0.0,
            "chunk": [("look", "Nothing happens."), ("inventory", "You are not carrying anything.")] * 2} for e in pos]
    s = TrajectoryScorer(ScorerConfig(epochs=10))
    s.fit(pos + neg)
    folder = tempfile.mkdtemp(prefix="alfworld_muse_scorer_")
    s.save(folder)
    return s, "quick: expert walkthrough chunks of 2 valid_train games vs look/inventory chunks"


def _run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.alfworld.agents import EpisodeContext
    from metacog_fast.alfworld.config import AgentConfig
    from metacog_fast.alfworld.fewshot import load_examples, strip_intro
    from metacog_fast.alfworld.memory import ReflectionMemory
    from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT, make_agent, select_games
    from metacog_fast.envs import make_env
    from metacog_fast.scoring import TrajectoryScorer

    if args.alfworld_muse_steps < 1 or args.alfworld_muse_rollouts < 1:
        raise ValueError("--alfworld-muse-steps / --alfworld-muse-rollouts: expected >= 1")
    t0 = time.perf_counter()
    llm, n_examples, actor, shipped_scorer = _actor(args.alfworld_muse_llm, args.seed)
    if args.alfworld_muse_scorer:
        scorer, origin = TrajectoryScorer.load(args.alfworld_muse_scorer), args.alfworld_muse_scorer
    elif shipped_scorer:
        scorer, origin = TrajectoryScorer.load(shipped_scorer), _scorer_origin(shipped_scorer)
    else:
        scorer, origin = _quick_scorer()
    g = select_games(args.alfworld_muse_split, args.alfworld_muse_game + 1)[args.alfworld_muse_game]
    ac = AgentConfig(max_steps=args.alfworld_muse_steps, rollouts=args.alfworld_muse_rollouts, rollout_max_tokens=32,
                     examples=n_examples)
    mem_dir = tempfile.mkdtemp(prefix="alfworld_muse_mem_")
    mem = ReflectionMemory(f"{mem_dir}/m.db", scorer.encoder)
    agent = make_agent("muse", llm, load_examples(DEFAULT_FEWSHOT), ac, scorer.encoder, mem, scorer)
    env = make_env("alfworld", split=args.alfworld_muse_split, max_episode_steps=ac.max_steps)
    bar = progress(total=ac.max_steps, desc="alfworld_muse")
    steps: list[dict[str, Any]] = []
    try:
        obs, info = env.reset(game=g["gamefile"])
        task = info["task"] if info["task"].startswith("Your task") else f"Your task is to: {info['task']}"
        agent.begin(EpisodeContext(g["game"], task, info["task_type"], strip_intro(obs), 0))
        print(f"\n[alfworld_muse] {task}\nActor: {actor}\nPlan: {agent.current_plan}\nScorer: {origin}",
              file=sys.stderr)
        decisions: list[Any] = []

        def policy(obs: str, info: dict[str, Any]) -> str:
            decisions.append(agent.act(info["admissible"]))
            return decisions[-1].action

        def show(step: Step) -> None:
            d = decisions[-1]
            agent.observe(d.action, step.obs)
            print(f"step {step.t + 1}:", file=sys.stderr)
            for i, (r, s) in enumerate(zip(d.info["rollouts"], d.info["scores"])):
                mark = "*" if i == d.info["chosen"] else " "
                print(f"  {mark} M_sa={s:.3g}  " + " | ".join(a for a, _ in r), file=sys.stderr)
            print(f"  -> {d.action}: {' '.join(step.obs.split())[:120]}", file=sys.stderr)
            steps.append({"action": d.action, "observation": " ".join(step.obs.split()), "rollouts": d.info["rollouts"],
                          "scores": d.info["scores"], "chosen": d.info["chosen"]})
            bar.update(1)

        won = play(env, policy, ac.max_steps, start=(obs, info), stop_on_success=True, on_step=show).final_success
    finally:
        bar.close()
        env.close()
        mem.close()
        llm.close()
    kind = "shipped" if args.alfworld_muse_llm.startswith("finetuned:") else "base model"
    return {"model": model_info(args.alfworld_muse_llm, kind, actor.split(": ", 1)[-1]),
            "summary": f"{'won' if won else 'not won'} in {len(steps)} steps, {ac.rollouts} rollouts scored by M_sa "
                       f"per step ({'the scorer shipped with the actor' if origin.startswith('shipped') else origin.split(':')[0]})",
            "game": g["game"], "task": task, "actor": actor, "plan": agent.current_plan, "scorer": origin, "steps": steps,
            "episodes": [{"task": task, "success": won, "steps": len(steps)}], "n_episodes": 1,
            "success_rate": 1.0 if won else 0.0, "wall_seconds": time.perf_counter() - t0}


register_demo_part(DemoPart("alfworld_muse", "one MUSE episode on ALFWorld: each step's rollouts with M_sa scores "
                            "(the shipped fine-tuned actor and its scorer)", AlfworldMuseDemo, _run,
                            needs=("alfworld",)))
