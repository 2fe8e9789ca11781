"""Training texts in exactly the form the ALFWorld actor prompts with.

An agent's prompt at step ``k`` is ``actor_prefix(...) + "> a_1\\no_1\\n" ... + ">"`` and the model
continues it with `` a_k\\n`` (:mod:`metacog_fast.alfworld.prompts`). A transcript is the
whole episode in that form, with the character spans the loss may be taken on: each action's
continuation (`` a_k\\n``) and each observation (``o_k\\n``, what MUSE's rollouts also sample).
So ``text[:span_start]`` of an action is, character for character, the prompt the agent sends.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from metacog_fast.alfworld import prompts

LOSS_MODES = ("actions", "actions+observations")


@dataclass
class Transcript:
    """One episode as a training text."""

    text: str
    """The prompt prefix followed by the ``> action`` / observation lines."""
    action_spans: list[tuple[int, int]] = field(default_factory=list)
    """[start, end) character spans of each action continuation (`` a\\n`` after ``>``)."""
    observation_spans: list[tuple[int, int]] = field(default_factory=list)
    """[start, end) character spans of each observation line (``o\\n``)."""

    def loss_spans(self, loss: str) -> list[tuple[int, int]]:
        """The spans the loss is taken on for ``loss`` (one of :data:`LOSS_MODES`), in text order."""
        if loss == "actions":
            return list(self.action_spans)
        if loss == "actions+observations":
            return sorted(self.action_spans + self.observation_spans)
        raise ValueError(f"loss: expected one of {LOSS_MODES}, got {loss!r}")


def actor_transcript(intro: str, pairs: Sequence[Sequence[str]], examples: Sequence[dict[str, Any]] = (),
                     plan: str | None = None) -> Transcript:
    """The transcript of an episode that began with ``intro`` and executed ``pairs`` of
    (action, observation); ``examples`` and ``plan`` as the agent's own prompt has them."""
    text = prompts.actor_prefix(examples, intro, (), plan)
    t = Transcript(text)
    parts = [text]
    pos = len(text)
    for a, o in pairs:
        act = f"> {a}\n"
        t.action_spans.append((pos + 1, pos + len(act)))
        pos += len(act)
        obs = f"{' '.join(o.split())}\n"
        t.observation_spans.append((pos, pos + len(obs)))
        pos += len(obs)
        parts += [act, obs]
    t.text = "".join(parts)
    return t
