"""Parsing LLM output into commands, and the admissible-action mapping option.

Modes (``AgentConfig.map_actions``, a reported configuration):

* ``"none"``   the cleaned text is sent as is (ALFWorld answers "Nothing happens." to invalid ones);
* ``"embed"``  exact match first, else the admissible command nearest by MiniLM cosine;
* ``"choose"`` exact match first, else the LLM's likelihood ranking of the admissible commands as
  continuations of the actor prompt (``LLM.choose``).
"""
from __future__ import annotations

from metacog_fast.llm.grounding import ActionMapper, Mapped, clean_action  # noqa: F401 - this package's names


def is_think(text: str) -> bool:
    return clean_action(text).lower().startswith("think:")


def parse_rollout(text: str, max_pairs: int) -> list[tuple[str, str]]:
    """(action, observation) pairs of a rollout generated after ``> ``: the first line is the
    action, the next non-command lines its observation, then ``> action`` lines again."""
    pairs: list[tuple[str, str]] = []
    action: str | None = None
    obs: list[str] = []
    first = True
    for raw in text.split("\n"):
        line = raw.strip()
        if first:
            first = False
            action = clean_action(line) or None
            continue
        if line.startswith(">"):
            if action:
                pairs.append((action, " ".join(obs)))
            if len(pairs) >= max_pairs:
                return pairs
            action, obs = clean_action(line) or None, []
        elif line.startswith("###"):
            break
        elif line:
            obs.append(line)
    if action and len(pairs) < max_pairs:
        pairs.append((action, " ".join(obs)))
    return pairs
