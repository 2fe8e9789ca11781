"""Action grounding and loop breaking for the plan-execute agent.

* Grounding (``ExperienceConfig.action_grounding``): how the actor's turn becomes one of the
  options (the env's admissible commands, ``access_guide <skill>``, ``finish``). ``"choice"``
  decodes under a constraint to exactly one option (``llm.generate_choice``); ``"embed"`` and
  ``"choose"`` let the model write a command freely and map it with the ALFWorld agents'
  :class:`~metacog_fast.alfworld.actions.ActionMapper` (exact match first, else the option
  nearest by MiniLM cosine, or the LLM's likelihood ranking of the options).
* Loop breaking (``ExperienceConfig.loop_breaking``): :class:`LoopBreaker`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

GROUNDINGS = ("choice", "embed", "choose")


def _norm_obs(obs: str) -> str:
    return " ".join(str(obs).lower().split())


PASSIVE = {
    "alfworld": ("go to", "look", "inventory", "examine", "help"),
    "scienceworld": ("go to", "teleport to", "look around", "look at", "look in", "inventory", "focus on", "wait"),
}
"""Action types that move or read but do not change the world; their new observations do not re-offer hidden commands."""


@dataclass
class LoopBreaker:
    """Hides commands that were repeated with an unchanged observation.

    A command whose last execution gave the same observation as the one before it is *stale* and not
    offered again (the 135M model's ``inventory`` x 30 and ``go to A / go to B / go to A`` loops):
    repeating it can only give back what the agent has already read. When the world changes, i.e. a
    command that is not a move or a read (``take``, ``put``, ``open``, ...) produces an observation
    never seen before in the episode, every stale command is offered again (after ``take`` the
    inventory and the other places read differently). If every option is stale, all are offered.
    """

    env: str = "alfworld"
    """Environment name (selects the move/read action types, :data:`PASSIVE`)."""
    last_obs: dict[str, str] = field(default_factory=dict)
    """Normalised observation of each command's last execution in the episode."""
    seen: set[str] = field(default_factory=set)
    """Normalised observations seen in the episode."""
    stale: set[str] = field(default_factory=set)
    """Commands not offered until the world changes."""
    hidden_turns: int = 0
    """Turns at which at least one option was hidden."""

    def record(self, action: str, observation: str) -> None:
        """Note one env step (agent or verification action) and its observation."""
        from metacog_fast.experience.tools import action_type

        key = _norm_obs(observation)
        if self.last_obs.get(action) == key:
            self.stale.add(action)
        kind = action_type(self.env, action)
        # Unknown command types ("help") count as reads: only a known world-changing action re-offers.
        if key not in self.seen and kind and kind not in PASSIVE.get(self.env, ()):
            self.stale.clear()
        self.seen.add(key)
        self.last_obs[action] = key

    def allowed(self, options: Sequence[str]) -> list[str]:
        """``options`` without the stale commands (all of them if none would be left)."""
        opts = list(options)
        keep = [o for o in opts if o not in self.stale]
        if not keep:
            return opts
        if len(keep) < len(opts):
            self.hidden_turns += 1
        return keep


_FILLER = {"a", "an", "the", "some", "to", "in", "on", "into", "onto", "from", "with", "at", "of", "it", "and",
           "then", "up", "your", "its"}
_VERB = {"put": "put", "place": "put", "move": "put", "drop": "put", "take": "take", "pick": "take",
         "grab": "take", "get": "take", "go": "go", "walk": "go"}


def _words(text: str) -> set[str]:
    import re

    return {_VERB.get(w, w) for w in re.findall(r"[a-z]+", text.lower()) if w not in _FILLER}


def subtask_commands(description: str, commands: Sequence[str]) -> list[str]:
    """Commands that spell out the sub-task itself: every word of ``description`` (fillers dropped,
    object numbers ignored, verb synonyms such as put/move/place and take/pick folded) occurs in the
    command. "take the book" -> ["take book 1 from bed 1", "take book 2 from bed 1"]; "find the book"
    -> [] (no command contains "find"). Descriptions of fewer than two such words match nothing."""
    need = _words(description)
    if len(need) < 2:
        return []
    return [c for c in commands if need <= _words(c)]
