"""``metacog demo --parts alfworld_muse``: one MUSE episode on an ALFWorld game, printing each
step's candidate rollouts with their competence scores M_sa (opt-in).

The actor is the fine-tuned model that ships in the package (``finetuned:alfworld``, its own
prompt setting from its model.json) unless ``--alfworld-muse-llm`` names another; the output says
which model it was and what that model measured.

Without ``--alfworld-muse-scorer`` a scorer is fitted on the spot on expert walkthrough chunks of
two ``valid_seen`` games (positives) and on chunks of repeated ``look`` / ``inventory``
(negatives), and the output says so.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any

from metacog_fast.cli.demo_registry import DemoPart, ProgressFactory, register_demo_part


def _args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("alfworld_muse (opt-in)")
    g.add_argument("--alfworld-muse-scorer", default=None,
                   help="pre-deployment scorer folder (default: a quick expert-walkthrough scorer)")
    g.add_argument("--alfworld-muse-split", default="valid_train", help="split (default valid_train)")
    g.add_argument("--alfworld-muse-game", type=int, default=0, help="game index in the round-robin order (default 0)")
    g.add_argument("--alfworld-muse-steps", type=int, default=6, help="episode steps (default 6)")
    g.add_argument("--alfworld-muse-rollouts", type=int, default=5, help="rollouts per step (default 5)")
    g.add_argument("--alfworld-muse-llm", default="finetuned:alfworld",
                   help="actor LLM URI (default finetuned:alfworld, the shipped fine-tuned SmolLM2; "
                        "'llama-cpp://' for the base model)")


def _actor(uri: str, seed: int) -> tuple[Any, int, str]:
    """(llm, few-shot examples, a line saying what the actor is) for ``uri``."""
    from metacog_fast.llm import open_llm
    from metacog_fast.llm.models import resolve_named_model

    info = None
    if uri.startswith("finetuned:"):
        info = resolve_named_model(uri.split(":", 1)[1].lstrip("/")).info or {}
    llm = open_llm(uri, n_threads=1, n_ctx=4096, seed=seed)
    if info is None:
        return llm, 2, f"{uri} (not fine-tuned; 2 few-shot examples)"
    examples = int(info.get("prompt", {}).get("examples", 2))
    ev = (info.get("evaluation") or {}).get("success")
    measured = (f"; measured {ev['successes']}/{ev['n']} = {100 * ev['rate']:.1f} % "
                f"[{100 * ev['low']:.1f}, {100 * ev['high']:.1f}] as ReAct on valid_train") if ev else ""
    return llm, examples, f"{uri}: {info.get('description', 'a fine-tuned model')}{measured}"


def _quick_scorer() -> tuple[Any, str]:
    from metacog_fast.agents.alfworld.protocol import expert_examples, select_games
    from metacog_fast.scoring import ScorerConfig, TrajectoryScorer

    games = select_games("valid_seen", 2)
    pos = expert_examples(games, "valid_seen", None)
    neg = [{"task": e["task"], "plan": e["plan"], "label": 0.0,
            "chunk": [("look", "Nothing happens."), ("inventory", "You are not carrying anything.")] * 2} for e in pos]
    s = TrajectoryScorer(ScorerConfig(epochs=10))
    s.fit(pos + neg)
    folder = tempfile.mkdtemp(prefix="alfworld_muse_scorer_")
    s.save(folder)
    return s, "quick: expert walkthrough chunks of 2 valid_seen games vs look/inventory chunks"


def _run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.agents.alfworld.agents import EpisodeContext
    from metacog_fast.agents.alfworld.config import AgentConfig
    from metacog_fast.agents.alfworld.fewshot import load_examples, strip_intro
    from metacog_fast.agents.alfworld.memory import ReflectionMemory
    from metacog_fast.agents.alfworld.protocol import DEFAULT_FEWSHOT, make_agent, select_games
    from metacog_fast.envs import make_env
    from metacog_fast.scoring import TrajectoryScorer

    if args.alfworld_muse_steps < 1 or args.alfworld_muse_rollouts < 1:
        raise ValueError("--alfworld-muse-steps / --alfworld-muse-rollouts: expected >= 1")
    t0 = time.perf_counter()
    if args.alfworld_muse_scorer:
        scorer, origin = TrajectoryScorer.load(args.alfworld_muse_scorer), args.alfworld_muse_scorer
    else:
        scorer, origin = _quick_scorer()
    g = select_games(args.alfworld_muse_split, args.alfworld_muse_game + 1)[args.alfworld_muse_game]
    llm, n_examples, actor = _actor(args.alfworld_muse_llm, args.seed)
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
        won = False
        for t in range(ac.max_steps):
            d = agent.act(info["admissible"])
            obs, _r, done, info = env.step(d.action)
            agent.observe(d.action, obs)
            print(f"step {t + 1}:", file=sys.stderr)
            for i, (r, s) in enumerate(zip(d.info["rollouts"], d.info["scores"])):
                mark = "*" if i == d.info["chosen"] else " "
                print(f"  {mark} M_sa={s:.3f}  " + " | ".join(a for a, _ in r), file=sys.stderr)
            print(f"  -> {d.action}: {' '.join(obs.split())[:120]}", file=sys.stderr)
            steps.append({"action": d.action, "observation": " ".join(obs.split()), "rollouts": d.info["rollouts"],
                          "scores": d.info["scores"], "chosen": d.info["chosen"]})
            bar.update(1)
            won = bool(info.get("won"))
            if won or done:
                break
    finally:
        bar.close()
        env.close()
        mem.close()
        llm.close()
    return {"game": g["game"], "task": task, "actor": actor, "plan": agent.current_plan, "scorer": origin, "steps": steps,
            "episodes": [{"task": task, "success": won, "steps": len(steps)}], "n_episodes": 1,
            "success_rate": 1.0 if won else 0.0, "wall_seconds": time.perf_counter() - t0}


register_demo_part(DemoPart("alfworld_muse", "one MUSE episode on ALFWorld: each step's rollouts with M_sa scores "
                            "(the shipped fine-tuned actor)", _args, _run, default=False,
                            needs=("alfworld",)))
