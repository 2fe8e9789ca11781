"""One episode of an agent in an ALFWorld env, timed: LLM, environment and the agent's own time.

Success is ``info["won"]`` (never ``done``, which is also True at the step limit).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from metacog_fast.alfworld.agents import EpisodeContext
from metacog_fast.alfworld.fewshot import strip_intro
from metacog_fast.envs.driver import Step, play

if TYPE_CHECKING:
    from metacog_fast.alfworld.agents import ReActAgent
    from metacog_fast.envs.base import Env
    from metacog_fast.llm.protocol import LLM


def llm_totals(*llms: LLM | None) -> tuple[int, int, int, float]:
    """Calls, prompt tokens, completion tokens and seconds summed over the distinct ``llms``
    (the actor and, where it is another model, the reflector)."""
    seen: list[LLM] = []
    for m in llms:
        if m is not None and all(m is not s for s in seen):
            seen.append(m)
    us = [m.usage for m in seen]
    return (sum(u.calls for u in us), sum(u.prompt_tokens for u in us), sum(u.completion_tokens for u in us),
            sum(u.seconds for u in us))


def run_episode(env: Env, agent: ReActAgent, llm: LLM, game: str, gamefile: str, episode: int, phase: str,
                max_steps: int, reflector: LLM | None = None) -> dict[str, Any]:
    """Play one episode of ``gamefile``; returns the JSON-able record (see docs/alfworld_agents.md).
    ``reflector``: the reflection LLM where it is not ``llm``; its calls count in the record's totals."""
    t_start = time.perf_counter()
    c0, p0, g0, s0 = llm_totals(llm, reflector)
    t = time.perf_counter()
    obs, info = env.reset(game=gamefile)
    reset_s = time.perf_counter() - t
    ctx = EpisodeContext(game=game, task=info["task"] if info["task"].startswith("Your task") else
                         f"Your task is to: {info['task']}", task_type=info["task_type"],
                         intro=strip_intro(obs), episode=episode)
    begin = agent.begin(ctx)
    pairs: list[list[str]] = []
    steps: list[dict[str, Any]] = []
    decisions: list[tuple[Any, float]] = []  # (decision, its LLM seconds)

    def policy(obs: str, info: dict[str, Any]) -> str:
        llm_before = llm.usage.seconds
        dec = agent.act(info.get("admissible"))
        decisions.append((dec, llm.usage.seconds - llm_before))
        return dec.action

    def observe(step: Step) -> None:
        t = time.perf_counter()
        obs = " ".join(step.obs.split())
        agent.observe(step.action, obs)
        pairs.append([step.action, obs])
        dec, step_llm = decisions[-1]
        own = step.policy_seconds - step_llm + time.perf_counter() - t
        steps.append({"action": dec.action, "proposed": dec.proposed, "how": dec.how, "thinks": dec.thinks,
                      "llm_seconds": step_llm, "env_seconds": step.env_seconds,
                      "agent_seconds": max(0.0, own), **dec.info})

    ep = play(env, policy, max_steps, start=(obs, info), stop_on_success=True, on_step=observe)
    won, done = ep.final_success, ep.done
    c1, p1, g1, s1 = llm_totals(llm, reflector)
    llm_episode = s1 - s0
    end = agent.end(won, [tuple(p) for p in pairs])
    c2, p2, g2, s2 = llm_totals(llm, reflector)
    return {
        "game": game, "gamefile": gamefile, "task": ctx.task, "task_type": ctx.task_type, "episode": episode,
        "phase": phase, "agent": agent.name, "won": won, "done": bool(done), "steps": len(pairs),
        "pairs": pairs, "step_log": steps, "begin": begin, "end": end,
        "plan": begin.get("plan", ""),
        "llm": {"calls": c2 - c0, "prompt_tokens": p2 - p0, "completion_tokens": g2 - g0, "seconds": s2 - s0,
                "seconds_acting": llm_episode, "seconds_reflecting": s2 - s1},
        "env_seconds": reset_s + ep.env_seconds,
        "agent_seconds": sum(s["agent_seconds"] for s in steps),
        "wall_seconds": time.perf_counter() - t_start,
    }
