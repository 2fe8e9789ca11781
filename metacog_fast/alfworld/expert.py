"""ALFWorld's hand-coded *searching* expert, usable from any state of a game.

The ``walkthrough`` stored in a json_2.1.1 game is a planner's: it knows where every hidden object
lies and goes straight to it (``go to dresser 1`` as the first command). An imitator cannot learn
that from what it sees, and it never shows what to do once the first guess is wrong. ALFWorld's
own hand-coded expert (``alfworld.agents.expert.HandCodedTWAgent``, the teacher of its DAgger
agents) decides only from what the agent has observed, the admissible commands and a few state
facts (what is held, whether it is hot, cool or clean, what lies in the target receptacle): it
searches receptacles in ALFRED's object-to-receptacle prior order, opens closed ones, and puts
back a wrong object. It follows whatever commands were actually taken, so it can label any state
an agent reaches (DAgger).

ALFWorld builds it from ``traj_data.json``, which these game folders do not ship; the task
parameters it needs are in the task folder's name, ``<task type>-<object>-<movable receptacle>-
<receptacle or lamp>-<scene>`` (:func:`task_params_of`).

The expert's random choices (which of several visible target objects to take; a random admissible
command when it would repeat itself) are drawn from a generator seeded by the game and the step,
so a game's expert is deterministic.
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from metacog_fast.alfworld.env import TASK_TYPES
from metacog_fast.envs.base import EnvSetupError


def task_params_of(gamefile: str | Path) -> dict[str, Any]:
    """The expert's task parameters from the task folder's name, in the lower case the text games use.

    ``look_at_obj_in_light-AlarmClock-None-DeskLamp-301/trial/game.tw-pddl`` ->
    ``{"task_type": "look_at_obj_in_light", "object_target": "alarmclock", "toggle_target": "desklamp",
    "parent_target": "", "mrecep_target": "", "object_sliced": False}``.
    """
    name = Path(gamefile).parent.parent.name
    parts = name.split("-")
    if len(parts) != 5 or parts[0] not in TASK_TYPES:
        raise ValueError(
            f"gamefile: task folder {name!r} is not '<task type>-<object>-<movable receptacle>-<receptacle>-<scene>' "
            f"with a task type of {TASK_TYPES}"
        )
    task, obj, mrecep, target, _scene = parts
    params: dict[str, Any] = {
        "task_type": task,
        "object_target": obj.lower(),
        "mrecep_target": "" if mrecep == "None" else mrecep.lower(),
        "parent_target": target.lower(),
        "toggle_target": "",
        "object_sliced": False,
    }
    if task == "look_at_obj_in_light":
        params["toggle_target"], params["parent_target"] = target.lower(), ""
    return params


class HandcodedExpert:
    """ALFWorld's hand-coded expert for one game; feed it every observation, get its next command.

    ``start(obs, admissible, facts)`` after a reset, then ``after_step(command, obs, admissible,
    facts, won)`` after every step with the command that was actually taken (the agent's or the
    expert's); both return the expert's next command, or None once it has given up.
    ``facts``: the game's textworld ``Proposition`` list (``EnvInfos(facts=True)``).
    """

    def __init__(self, gamefile: str | Path, max_steps: int = 200) -> None:
        try:
            from alfworld.agents.expert.handcoded_expert_tw import HandCodedTWAgent
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EnvSetupError(f"the hand-coded expert needs alfworld ({exc}): pip install 'alfworld>=0.4.2'") from exc
        self.gamefile = str(gamefile)
        self.params = task_params_of(gamefile)
        agent = HandCodedTWAgent(max_steps=max_steps)
        agent.task_params = dict(self.params)
        agent.policy = agent.get_task_policy(agent.task_params)(agent.task_params, max_steps=max_steps)
        self._agent = agent
        self._t = 0
        self.gave_up: str | None = None
        """Why the expert stopped (``"failed"``: its subgoals ran out; ``"timeout"``), else None."""

    def start(self, obs: str, admissible: list[str], facts: list[Any]) -> str | None:
        self._agent.observe(obs)
        return self._act(obs, admissible, facts, False, "")

    def after_step(self, command: str, obs: str, admissible: list[str], facts: list[Any], won: bool) -> str | None:
        # The expert's state tracking knows the placing command as "put X in/on Y"; these games say
        # "move X to Y". Unseen, a placed object stays in its inventory, so in two-object tasks it
        # tries to place the first object again (2/10 won on valid_train instead of 9/10).
        if command.startswith("move "):
            command = "put " + command[len("move "):]
        return self._act(obs, admissible, facts, won, command)

    def _act(self, obs: str, admissible: list[str], facts: list[Any], won: bool, last: str) -> str | None:
        from alfworld.agents.expert.handcoded_expert import HandCodedAgentFailed, HandCodedAgentTimeout

        if self.gave_up is not None:
            return None
        state = {"feedback": obs, "admissible_commands": list(admissible), "facts": list(facts), "won": won}
        outer = random.getstate()
        random.seed(f"{self.gamefile}:{self._t}")
        try:
            return str(self._agent.act(state, 0, won, last))
        except HandCodedAgentFailed:
            self.gave_up = "failed"
        except HandCodedAgentTimeout:
            self.gave_up = "timeout"
        except (IndexError, KeyError) as exc:
            # The expert's own state tracking breaks on some off-path histories (e.g. an inventory
            # it did not see being filled); it has no advice for such a state.
            self.gave_up = f"error: {type(exc).__name__}: {exc}"
        finally:
            random.setstate(outer)
            self._t += 1
        return None


__all__ = ["HandcodedExpert", "task_params_of"]
