"""One episode loop for every environment and policy (after dreamerv3's ``embodied.Driver``).

    from metacog_fast.envs import STOP, play
    ep = play(env, lambda obs, info: env.expert(), max_steps=50, reset_kwargs={"seed": 0},
              on_step=lambda step: print(step.t, step.reward))
    ep.steps, ep.success, ep.return_, ep.env_seconds

Design choices:

- **Policy**: any callable ``policy(obs, info) -> action``; an agent whose method has another
  signature is wrapped by its caller (``lambda obs, info: agent.act(obs)``), since agents differ
  in what they read (the observation, the admissible commands). Returning ``None`` ends the
  episode with no step taken (an expert whose plan ran out, a walkthrough at its end).
  :func:`sequence_policy` plays a fixed action list.
- **Reset**: ``play`` resets with ``env.reset(**reset_kwargs)``, or the caller passes the reset's
  ``start=(obs, info)`` (several episodes sharing a setup, an env reset elsewhere).
- **Success** is read through one rule, :func:`success_of`: ``env.success(info)`` where the env
  defines it, else ``info["won"]`` where present (ALFWorld, ScienceWorld), else
  ``info["success"]`` (Meta-World), else False. ``Episode.success`` is success at any step,
  ``final_success`` at the last one, ``first_success`` the 1-based step of the first.
- **Stop rule**, checked in this order after each step: ``done``; success when
  ``stop_on_success=True``; a callback returned :data:`STOP`; ``max_steps`` steps taken
  (``None``: no limit, the env's own limit or the policy ends it). Before a step: the policy
  returned ``None``. ``Episode.end`` names the rule that ended it.
- **Callbacks**: objects with any of ``on_reset(obs, info)``, ``on_step(step)``,
  ``on_end(episode)`` in ``callbacks`` (called in that order), then the ``on_reset=`` /
  ``on_step=`` / ``on_end=`` functions. An ``on_reset`` or ``on_step`` returning :data:`STOP`
  ends the episode once every callback of that moment has run (so records stay complete);
  an ``on_reset`` stop means no step at all.
- **Timing** (``time.perf_counter``): ``env_seconds`` is the wall time inside ``env.reset`` (when
  ``play`` resets) and ``env.step``; ``policy_seconds`` inside the policy; ``wall_seconds`` the
  whole call up to ``on_end`` (the reset, and the ``on_reset``/``on_step`` callbacks included). ``Step`` carries the step's own env and policy seconds.
  (``env.timings`` counts only the adapter's ``_step``; measuring around the call works for any
  object with ``reset``/``step`` and adds only the adapter's guard.)
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["STOP", "Episode", "Policy", "Step", "play", "sequence_policy", "success_of"]

Policy = Callable[[Any, dict[str, Any]], Any]
"""``policy(obs, info) -> action``, or ``None`` to end the episode."""


class _Stop:
    def __repr__(self) -> str:
        return "STOP"


STOP = _Stop()
"""Returned by an ``on_reset`` / ``on_step`` callback: end the episode (after that moment's callbacks)."""


@dataclass
class Step:
    """One transition, as ``on_step`` callbacks see it."""

    t: int
    """0-based index of the step in the episode."""
    obs: Any
    """Observation after the action."""
    action: Any
    reward: float
    done: bool
    info: dict[str, Any]
    """The env's info after the action."""
    success: bool
    """:func:`success_of` this step's info."""
    env_seconds: float
    """Wall seconds inside ``env.step``."""
    policy_seconds: float
    """Wall seconds inside the policy call that chose ``action``."""


@dataclass
class Episode:
    """What one :func:`play` call did. Lists: ``observations``/``infos`` [steps + 1] (the reset's
    first), ``actions``/``rewards`` [steps]."""

    observations: list[Any] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    actions: list[Any] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    steps: int = 0
    success: bool = False
    """Success at any step."""
    final_success: bool = False
    """Success at the last step (False with no step)."""
    first_success: int | None = None
    """1-based step of the first success, None if none."""
    done: bool = False
    """The env's ``done`` at the last step (False with no step)."""
    return_: float = 0.0
    """Sum of the rewards, in step order from 0.0."""
    end: str = ""
    """Why it ended: "done", "success", "callback", "max_steps" or "policy"."""
    env_seconds: float = 0.0
    policy_seconds: float = 0.0
    wall_seconds: float = 0.0
    reset_seconds: float = 0.0
    """Wall seconds inside ``env.reset`` (0 when the caller passed ``start``); part of ``env_seconds``."""

    @property
    def obs(self) -> Any:
        """The last observation."""
        return self.observations[-1]

    @property
    def info(self) -> dict[str, Any]:
        """The last info (the reset's with no step)."""
        return self.infos[-1]


def success_of(env: Any, info: dict[str, Any]) -> bool:
    """The one success rule: ``env.success(info)`` if the env defines it, else ``info["won"]``,
    else ``info["success"]``, else False."""
    rule = getattr(env, "success", None)
    if callable(rule):
        return bool(rule(info))
    if "won" in info:
        return bool(info["won"])
    return bool(info.get("success", False))


def sequence_policy(actions: Iterable[Any]) -> Policy:
    """A policy playing ``actions`` in order, then ``None`` (the episode ends)."""
    it = iter(list(actions))
    return lambda obs, info: next(it, None)


def _hooks(callbacks: Sequence[Any], name: str, extra: Callable[..., Any] | None) -> list[Callable[..., Any]]:
    out = [getattr(c, name) for c in callbacks if callable(getattr(c, name, None))]
    if extra is not None:
        if not callable(extra):
            raise ValueError(f"{name}: expected a callable, got {type(extra).__name__}")
        out.append(extra)
    return out


def play(env: Any, policy: Policy, max_steps: int | None, callbacks: Sequence[Any] = (), *,
         reset_kwargs: dict[str, Any] | None = None, start: tuple[Any, dict[str, Any]] | None = None,
         stop_on_success: bool = False, on_reset: Callable[[Any, dict[str, Any]], Any] | None = None,
         on_step: Callable[[Step], Any] | None = None,
         on_end: Callable[[Episode], Any] | None = None) -> Episode:
    """Play one episode of ``env`` with ``policy``; see the module docstring for the rules.

    ``max_steps``: an int >= 1, or None for no limit. ``reset_kwargs`` go to ``env.reset``;
    ``start``: the ``(obs, info)`` of a reset the caller made (then ``play`` does not reset)."""
    if not callable(policy):
        raise ValueError(f"policy: expected a callable policy(obs, info) -> action, got {type(policy).__name__}")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise ValueError(f"max_steps: expected None or an int >= 1, got {max_steps!r}")
    if start is not None and reset_kwargs:
        raise ValueError("start: pass either start (a reset already made) or reset_kwargs, not both")
    if start is not None and (not isinstance(start, tuple) or len(start) != 2):
        raise ValueError(f"start: expected the (obs, info) pair of env.reset(), got {type(start).__name__}")
    if isinstance(callbacks, (str, bytes)) or not isinstance(callbacks, Sequence):
        raise ValueError(f"callbacks: expected a sequence of callback objects, got {type(callbacks).__name__}")
    resets = _hooks(callbacks, "on_reset", on_reset)
    steps = _hooks(callbacks, "on_step", on_step)
    ends = _hooks(callbacks, "on_end", on_end)

    t_start = time.perf_counter()
    ep = Episode()
    if start is None:
        t0 = time.perf_counter()
        obs, info = env.reset(**(reset_kwargs or {}))
        ep.reset_seconds = time.perf_counter() - t0
        ep.env_seconds = ep.reset_seconds
    else:
        obs, info = start
    ep.observations.append(obs)
    ep.infos.append(info)
    stop = any([fn(obs, info) is STOP for fn in resets])
    ep.end = "callback" if stop else ""
    t = 0
    while not stop:
        if max_steps is not None and t >= max_steps:
            ep.end = "max_steps"
            break
        t0 = time.perf_counter()
        action = policy(obs, info)
        policy_s = time.perf_counter() - t0
        ep.policy_seconds += policy_s
        if action is None:
            ep.end = "policy"
            break
        t0 = time.perf_counter()
        obs, reward, done, info = env.step(action)
        env_s = time.perf_counter() - t0
        ep.env_seconds += env_s
        ok = success_of(env, info)
        ep.observations.append(obs)
        ep.infos.append(info)
        ep.actions.append(action)
        ep.rewards.append(reward)
        ep.return_ += reward
        ep.steps = t + 1
        ep.done = bool(done)
        ep.final_success = ok
        if ok and ep.first_success is None:
            ep.first_success = t + 1
        ep.success = ep.success or ok
        step = Step(t, obs, action, reward, bool(done), info, ok, env_s, policy_s)
        halt = any([fn(step) is STOP for fn in steps])  # a list: every callback runs
        t += 1
        if done:
            ep.end = "done"
        elif ok and stop_on_success:
            ep.end = "success"
        elif halt:
            ep.end = "callback"
        else:
            continue
        break
    ep.wall_seconds = time.perf_counter() - t_start
    for fn in ends:
        fn(ep)
    return ep
