"""``metacog demo`` parts that drive each environment with its expert.

Meta-World: the scripted policy on a few MT10 tasks; ALFWorld: a few games' walkthroughs;
ScienceWorld: the gold path of a few tasks. Each reports success and step/reset rates
from the adapters' own timings.
"""
from __future__ import annotations

import argparse
import time
from typing import Any

from metacog_fast.cli.demo_registry import DemoPart, ProgressFactory, model_info, register_demo_part
from metacog_fast.envs.base import Env


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return v


def _summary(envs: list[Env], episodes: list[dict[str, Any]], wall: float, expert: str) -> dict[str, Any]:
    """Success over ``episodes``; step and reset rates from the adapters' own timings."""
    n = len(episodes)
    steps = sum(e.timings.steps for e in envs)
    step_s = sum(e.timings.step_seconds for e in envs)
    resets = sum(e.timings.resets for e in envs)
    reset_s = sum(e.timings.reset_seconds for e in envs)
    return {
        "model": model_info(expert, "scripted expert",
                            "the environment's own solution, a check of the install, not an agent"),
        "episodes": episodes,
        "n_episodes": n,
        "success_rate": sum(e["success"] for e in episodes) / n if n else 0.0,
        "steps_per_second": steps / step_s if step_s else 0.0,
        "mean_reset_seconds": reset_s / resets if resets else 0.0,
        "timings": {"steps": steps, "step_seconds": step_s, "resets": resets, "reset_seconds": reset_s},
        "wall_seconds": wall,
    }


# -- Meta-World --------------------------------------------------------------------------
def _play_expert_plan(env: Env, info: dict[str, Any]) -> dict[str, Any]:
    """Step ``env`` with its expert until the episode ends or the plan runs out; the last info."""
    done = False
    while not done:
        action = env.expert()
        if action is None:
            break
        _, _, done, info = env.step(action)
    return info


def _mw_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("metaworld")
    g.add_argument("--metaworld-tasks", type=_positive, default=3, help="first N MT10 tasks (default 3)")
    g.add_argument("--metaworld-episodes", type=_positive, default=1, help="episodes per task (default 1)")
    g.add_argument("--metaworld-steps", type=_positive, default=500, help="steps per episode, <= 500 (default 500)")


def _mw_run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.envs.metaworld_env import MT10_TASKS, MetaWorldEnv, MetaWorldConfig

    tasks = list(MT10_TASKS[: args.metaworld_tasks])
    episodes: list[dict[str, Any]] = []
    wall0 = time.perf_counter()
    per_task: list[Env] = []
    bar = progress(total=len(tasks) * args.metaworld_episodes, desc="metaworld")
    for task in tasks:
        env = MetaWorldEnv(MetaWorldConfig(task=task, seed=args.seed, max_episode_steps=args.metaworld_steps))
        per_task.append(env)
        for ep in range(args.metaworld_episodes):
            obs, info = env.reset()
            done, ret, first_success = False, 0.0, None
            while not done:
                obs, r, done, info = env.step(env.expert())
                ret += r
                if info["success"] and first_success is None:
                    first_success = info["steps"]
            episodes.append(
                {"task": task, "episode": ep, "success": first_success is not None, "steps_to_success": first_success,
                 "steps": info["steps"], "return": ret}
            )
            bar.update(1)
            bar.set_postfix_str(f"{task}: {'ok' if first_success else 'fail'}")
        env.close()
    bar.close()
    out = _summary(per_task, episodes, time.perf_counter() - wall0, "Meta-World scripted policies")
    out["tasks"] = tasks
    return out


# -- ALFWorld ----------------------------------------------------------------------------
def _aw_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("alfworld")
    g.add_argument("--alfworld-games", type=_positive, default=6, help="games, one task type after the other (default 6: one per type)")
    g.add_argument("--alfworld-split", default="valid_seen", help="split folder (default valid_seen)")
    g.add_argument("--alfworld-data", default=None, help="data folder (default $ALFWORLD_DATA or <repo>/data/alfworld)")


def _round_robin_by_type(games: list[Any], n: int) -> list[int]:
    """Indices of ``n`` games taking each task type in turn, so that every type shows up."""
    from metacog_fast.envs.alfworld_env import task_type_of

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
    from metacog_fast.envs.alfworld_env import AlfWorldEnv, AlfWorldConfig

    wall0 = time.perf_counter()
    env = AlfWorldEnv(AlfWorldConfig(split=args.alfworld_split, data=args.alfworld_data))
    picks = _round_robin_by_type(env.games, args.alfworld_games)
    episodes: list[dict[str, Any]] = []
    bar = progress(total=len(picks), desc="alfworld")
    for idx in picks:
        _, info = env.reset(game=idx)
        reset_s = env.timings.last_reset_seconds
        info = _play_expert_plan(env, info)
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
    out = _summary([env], episodes, time.perf_counter() - wall0, "ALFWorld expert walkthroughs")
    out["first_reset_seconds_mean"] = sum(e["reset_seconds"] for e in episodes) / len(episodes)
    out["cached_reset_seconds"] = cached
    out["split"] = args.alfworld_split
    env.close()
    return out


# -- ScienceWorld ------------------------------------------------------------------------
def _sw_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scienceworld")
    g.add_argument(
        "--scienceworld-tasks",
        default="find-non-living-thing,identify-life-stages-1",
        help="comma-separated task names, ids or indices 0-29 (default: two short tasks)",
    )
    g.add_argument("--scienceworld-episodes", type=_positive, default=1, help="variations per task (default 1)")
    g.add_argument("--scienceworld-split", default="train", help="variation split (default train)")


def _sw_run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.envs.scienceworld_env import ScienceWorldEnv, ScienceWorldConfig, resolve_task

    tasks = [resolve_task(t) for t in _csv(args.scienceworld_tasks)]
    if not tasks:
        raise ValueError("--scienceworld-tasks: expected at least one task")
    wall0 = time.perf_counter()
    episodes: list[dict[str, Any]] = []
    envs: list[Env] = []
    bar = progress(total=len(tasks) * args.scienceworld_episodes, desc="scienceworld")
    for task in tasks:
        env = ScienceWorldEnv(ScienceWorldConfig(task=task, split=args.scienceworld_split))
        envs.append(env)
        for _ in range(args.scienceworld_episodes):
            _, info = env.reset()
            info = _play_expert_plan(env, info)
            episodes.append(
                {"task": task, "variation": info["variation"], "success": info["won"], "score": info["score"],
                 "steps": info["steps"], "errored": info["errored"], "reset_seconds": env.timings.last_reset_seconds}
            )
            bar.update(1)
            bar.set_postfix_str(f"{task}: score {info['score']:.0f}")
        env.close()
    bar.close()
    out = _summary(envs, episodes, time.perf_counter() - wall0, "ScienceWorld gold action paths")
    out["mean_score"] = sum(e["score"] for e in episodes) / len(episodes)
    return out


register_demo_part(DemoPart("metaworld", "Meta-World scripted policy on the first MT10 tasks", _mw_args, _mw_run, needs=("metaworld",), quick=True))
register_demo_part(DemoPart("alfworld", "ALFWorld games played by their walkthroughs", _aw_args, _aw_run, needs=("alfworld",), quick=True))
register_demo_part(DemoPart("scienceworld", "ScienceWorld tasks played by their gold paths", _sw_args, _sw_run, needs=("scienceworld",), quick=True))
