"""The episode driver ``metacog_fast.envs.play``: its stop rules, callbacks, timings and argument
checks on a tiny in-file env, and real episodes of Meta-World (reach-v3, scripted expert) and
ALFWorld (hand-coded expert on one valid_seen game)."""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from metacog_fast.envs import STOP, Env, Episode, Step, play, sequence_policy, success_of


class Counter(Env):
    """obs = steps taken; reward 1.0 a step; done after ``done_at`` steps; ``info["won"]`` from
    step ``success_at`` on (only at that step when ``success_once``); each step sleeps ``step_s``."""

    name = "counter"

    def __init__(self, done_at: int = 100, success_at: int | None = None, success_once: bool = False,
                 step_s: float = 0.0) -> None:
        super().__init__()
        self.done_at, self.success_at, self.success_once, self.step_s = done_at, success_at, success_once, step_s
        self.t = 0
        self.options: dict[str, Any] = {}

    def _won(self) -> bool:
        if self.success_at is None:
            return False
        return self.t == self.success_at if self.success_once else self.t >= self.success_at

    def _reset(self, **options: Any) -> tuple[int, dict[str, Any]]:
        self.t, self.options = 0, options
        return 0, {"won": False, "task": "count"}

    def _step(self, action: Any) -> tuple[int, float, bool, dict[str, Any]]:
        if self.step_s:
            time.sleep(self.step_s)
        self.t += 1
        return self.t, 1.0, self.t >= self.done_at, {"won": self._won(), "action": action}

    def expert(self) -> int:
        return 1


def one(obs: Any, info: dict[str, Any]) -> int:
    return 1


def test_stops_at_max_steps() -> None:
    ep = play(Counter(), one, 3)
    assert (ep.steps, ep.end, ep.done, ep.success) == (3, "max_steps", False, False)
    assert ep.observations == [0, 1, 2, 3] and ep.actions == [1, 1, 1] and ep.rewards == [1.0] * 3
    assert len(ep.infos) == 4 and ep.infos[0]["task"] == "count" and ep.obs == 3 and ep.info is ep.infos[-1]
    assert ep.return_ == 3.0 and ep.first_success is None


def test_stops_at_done_before_max_steps_and_after_it() -> None:
    ep = play(Counter(done_at=2), one, 10)
    assert (ep.steps, ep.end, ep.done) == (2, "done", True)
    ep = play(Counter(done_at=2), one, 2)  # done on the last allowed step: done wins
    assert (ep.steps, ep.end, ep.done) == (2, "done", True)
    ep = play(Counter(done_at=4), one, None)  # no limit: the env's own
    assert (ep.steps, ep.end) == (4, "done")


def test_success_with_and_without_stop_on_success() -> None:
    ep = play(Counter(done_at=5, success_at=2), one, 10, stop_on_success=True)
    assert (ep.steps, ep.end, ep.success, ep.final_success, ep.first_success, ep.done) == (2, "success", True, True, 2,
                                                                                         False)
    ep = play(Counter(done_at=5, success_at=2), one, 10)
    assert (ep.steps, ep.end, ep.success, ep.final_success, ep.first_success) == (5, "done", True, True, 2)
    ep = play(Counter(done_at=5, success_at=2, success_once=True), one, 10)
    assert (ep.success, ep.final_success, ep.first_success) == (True, False, 2)


def test_policy_returning_none_ends_the_episode_without_a_step() -> None:
    ep = play(Counter(), sequence_policy(["a", "b"]), 10)
    assert (ep.steps, ep.end, ep.actions, ep.done) == (2, "policy", ["a", "b"], False)
    env = Counter()
    ep = play(env, lambda obs, info: None, 10)
    assert (ep.steps, ep.end, ep.observations, env.timings.steps) == (0, "policy", [0], 0)
    assert ep.final_success is False and ep.info == {"won": False, "task": "count"}


def test_a_callback_stops_the_episode_after_every_callback_of_that_step_ran() -> None:
    seen: list[tuple[str, int]] = []

    class Stopper:
        def on_step(self, step: Step) -> Any:
            seen.append(("stopper", step.t))
            return STOP if step.t == 1 else None

    ep = play(Counter(), one, 10, [Stopper()], on_step=lambda s: seen.append(("after", s.t)))
    assert (ep.steps, ep.end) == (2, "callback")
    assert seen == [("stopper", 0), ("after", 0), ("stopper", 1), ("after", 1)]
    env = Counter()
    ep = play(env, one, 10, on_reset=lambda obs, info: STOP)
    assert (ep.steps, ep.end, env.timings.resets, env.timings.steps) == (0, "callback", 1, 0)


def test_callbacks_in_order_with_the_right_step_indices() -> None:
    events: list[Any] = []

    class Log:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def on_reset(self, obs: Any, info: dict[str, Any]) -> None:
            events.append((self.tag, "reset", obs))

        def on_step(self, step: Step) -> None:
            events.append((self.tag, "step", step.t, step.obs, step.action, step.reward, step.done, step.success))

        def on_end(self, ep: Episode) -> None:
            events.append((self.tag, "end", ep.steps))

    class OnlyEnd:
        def on_end(self, ep: Episode) -> None:
            events.append(("only", "end", ep.end))

    actions = iter(["x", "y", "z"])
    ep = play(Counter(done_at=3, success_at=3), lambda obs, info: next(actions), 10, [Log("a"), OnlyEnd(), Log("b")],
              on_end=lambda ep: events.append(("kw", "end", ep.done)))
    assert events == [
        ("a", "reset", 0), ("b", "reset", 0),
        ("a", "step", 0, 1, "x", 1.0, False, False), ("b", "step", 0, 1, "x", 1.0, False, False),
        ("a", "step", 1, 2, "y", 1.0, False, False), ("b", "step", 1, 2, "y", 1.0, False, False),
        ("a", "step", 2, 3, "z", 1.0, True, True), ("b", "step", 2, 3, "z", 1.0, True, True),
        ("a", "end", 3), ("only", "end", "done"), ("b", "end", 3), ("kw", "end", True),
    ]


def test_the_policy_sees_each_observation_and_info() -> None:
    seen: list[tuple[Any, Any]] = []

    def policy(obs: Any, info: dict[str, Any]) -> int:
        seen.append((obs, info.get("action")))
        return 7

    ep = play(Counter(), policy, 3)
    assert seen == [(0, None), (1, 7), (2, 7)] and ep.actions == [7, 7, 7]


def test_reset_options_pass_through_or_the_callers_reset_is_used() -> None:
    env = Counter()
    play(env, one, 1, reset_kwargs={"game": "g", "seed": 3})
    assert env.options == {"game": "g", "seed": 3} and env.timings.resets == 1
    start = env.reset(seed=9)
    ep = play(env, one, 2, start=start)
    assert env.timings.resets == 2 and ep.observations == [0, 1, 2] and ep.reset_seconds == 0.0


def test_timings_are_non_negative_and_sum_below_wall_time() -> None:
    steps: list[Step] = []

    def slow(obs: Any, info: dict[str, Any]) -> int:
        time.sleep(0.002)
        return 1

    ep = play(Counter(step_s=0.003), slow, 4, reset_kwargs={}, on_step=steps.append)
    assert all(s.env_seconds >= 0.003 and s.policy_seconds >= 0.002 for s in steps)
    assert ep.reset_seconds >= 0 and ep.env_seconds >= 4 * 0.003 and ep.policy_seconds >= 4 * 0.002
    assert ep.env_seconds + ep.policy_seconds <= ep.wall_seconds
    assert ep.env_seconds == pytest.approx(ep.reset_seconds + sum(s.env_seconds for s in steps))
    assert ep.policy_seconds == pytest.approx(sum(s.policy_seconds for s in steps))


@pytest.mark.parametrize("max_steps", [0, -1, 1.5, True, "3"])
def test_bad_max_steps(max_steps: Any) -> None:
    with pytest.raises(ValueError, match="max_steps"):
        play(Counter(), one, max_steps)


def test_bad_arguments_name_the_argument() -> None:
    env = Counter()
    with pytest.raises(ValueError, match="policy"):
        play(env, "expert", 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="start"):
        play(env, one, 3, reset_kwargs={"seed": 1}, start=(0, {}))
    with pytest.raises(ValueError, match="start"):
        play(env, one, 3, start=[0, {}])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="callbacks"):
        play(env, one, 3, "on_step")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_step"):
        play(env, one, 3, on_step=3)  # type: ignore[arg-type]
    assert env.timings.resets == 0  # checked before anything ran


def test_success_rule() -> None:
    class Scored(Counter):
        def success(self, info: dict[str, Any]) -> bool:
            return info.get("score", 0) >= 10

    assert success_of(Scored(), {"won": True, "score": 3}) is False
    assert success_of(Scored(), {"won": False, "score": 10}) is True
    assert success_of(Counter(), {"won": True, "success": False}) is True
    assert success_of(Counter(), {"success": True}) is True
    assert success_of(Counter(), {}) is False
    ep = play(Scored(), one, 3, stop_on_success=True)  # its rule, not "won", decides
    assert (ep.success, ep.end) == (False, "max_steps")


# ------------------------------------------------------------------ real environments
def test_metaworld_reach_with_the_scripted_expert() -> None:
    pytest.importorskip("metaworld")
    from metacog_fast.envs import make_env

    env = make_env("metaworld", task="reach-v3", seed=1, max_episode_steps=150)
    try:
        ep = play(env, lambda obs, info: env.expert(), 150, reset_kwargs={"seed": 4}, stop_on_success=True)
        assert ep.success and ep.end == "success" and ep.steps == ep.first_success < 150
        assert all(isinstance(r, float) for r in ep.rewards) and ep.return_ == pytest.approx(sum(ep.rewards))
        # the same episode by hand: the driver changes nothing the env sees
        obs, _ = env.reset(seed=4)
        np.testing.assert_array_equal(obs, ep.observations[0])
        for t in range(ep.steps):
            a = env.expert()
            np.testing.assert_array_equal(a, ep.actions[t])
            obs, r, _done, info = env.step(a)
            np.testing.assert_array_equal(obs, ep.observations[t + 1])
            assert r == ep.rewards[t] and info["success"] == (t + 1 == ep.steps)
        full = play(env, lambda obs, info: env.expert(), 200, reset_kwargs={"seed": 4})
        assert (full.steps, full.end, full.done, full.first_success) == (150, "done", True, ep.steps)
        assert env.timings.steps == 2 * ep.steps + 150
    finally:
        env.close()


def test_alfworld_handcoded_expert_on_one_valid_seen_game() -> None:
    pytest.importorskip("alfworld")
    pytest.importorskip("textworld")
    from metacog_fast.envs import EnvSetupError, make_env
    from metacog_fast.alfworld.env import list_games

    try:
        game = list_games("valid_seen")[0]
    except EnvSetupError as exc:
        pytest.skip(f"ALFWorld games not available: {exc}")
    env = make_env("alfworld", split="valid_seen", max_episode_steps=50, handcoded_expert=True)
    try:
        ep = play(env, lambda obs, info: env.handcoded_action(), 50, reset_kwargs={"game": str(game)},
                  stop_on_success=True)
        assert ep.success == bool(ep.info["won"]) and ep.end in ("success", "done", "policy", "max_steps")
        assert ep.steps == len(ep.actions) >= 1 and all(isinstance(a, str) for a in ep.actions)
        assert ep.success, f"the hand-coded expert did not win {game} ({ep.end} after {ep.steps} steps)"
        # the walkthrough wins too, played as a fixed action list
        walk = play(env, sequence_policy(_walkthrough(env, game)), None, reset_kwargs={"game": str(game)})
        assert walk.success and walk.actions == env.walkthrough
    finally:
        env.close()


def _walkthrough(env: Any, game: Any) -> list[str]:
    env.reset(game=str(game))
    return env.walkthrough
