"""Episode chunking and the text rendering of trajectory chunks (MUSE §4.1.3).

An episode is a list of (action, observation) pairs. Training chunks are
non-overlapping runs of ``size`` pairs (4 in the paper): (a1,o1)..(a4,o4),
(a5,o5)..(a8,o8), ...; a last partial chunk is kept.

Rendering (the text that MiniLM embeds as ``M(tau ⊕ P)``)::

    > go to countertop 1
    You arrive at countertop 1. On the countertop 1, you see a bowl 1.
    > take bowl 1 from countertop 1
    You pick up the bowl 1 from the countertop 1.
    Plan: 1. find a bowl. 2. clean it with the sinkbasin. 3. put it in a cabinet.

one ``> action`` line per pair, followed by its observation on the next line
when the observation is not empty, then the plan (tau first, then P, the order
of the paper's concatenation). Whitespace in actions and observations is
collapsed to single spaces.
"""
from __future__ import annotations

from typing import Any, Sequence

Pair = tuple[str, str]
Chunk = list[Pair]


def _clean(text: str) -> str:
    return " ".join(text.split())


def as_pairs(pairs: Sequence[Any], name: str = "pairs") -> Chunk:
    """Validate (action, observation) pairs: action a non-empty str, observation a str or None."""
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Sequence):
        raise TypeError(f"{name}: expected a sequence of (action, observation) pairs, got {type(pairs).__name__}")
    out: Chunk = []
    for i, p in enumerate(pairs):
        if isinstance(p, (str, bytes)) or not isinstance(p, Sequence) or len(p) != 2:
            raise TypeError(f"{name}[{i}]: expected an (action, observation) pair, got {p!r}")
        action, obs = p
        if not isinstance(action, str) or not action.strip():
            raise ValueError(f"{name}[{i}]: expected a non-empty action string, got {action!r}")
        if obs is None:
            obs = ""
        if not isinstance(obs, str):
            raise TypeError(f"{name}[{i}]: expected the observation as str or None, got {type(obs).__name__}")
        out.append((_clean(action), _clean(obs)))
    return out


def chunk_episode(pairs: Sequence[Any], size: int = 4) -> list[Chunk]:
    """Split an episode [(action, observation), ...] into non-overlapping chunks of ``size`` pairs.

    The last chunk keeps the remainder (fewer than ``size`` pairs); an empty
    episode gives no chunks.
    """
    if int(size) < 1:
        raise ValueError(f"size: expected a positive chunk size, got {size}")
    clean = as_pairs(pairs)
    return [clean[i : i + int(size)] for i in range(0, len(clean), int(size))]


def render_chunk(chunk: Sequence[Any]) -> str:
    """Text of a chunk: ``> action`` lines, each followed by its non-empty observation."""
    clean = as_pairs(chunk, "chunk")
    if not clean:
        raise ValueError("chunk: expected at least one (action, observation) pair, got an empty chunk")
    lines = []
    for action, obs in clean:
        lines.append(f"> {action}")
        if obs:
            lines.append(obs)
    return "\n".join(lines)


def render_trajectory(chunk: Sequence[Any], plan: str) -> str:
    """The text of ``tau ⊕ P``: the rendered chunk, then ``Plan: <plan>`` when the plan is not empty."""
    if not isinstance(plan, str):
        raise TypeError(f"plan: expected a str, got {type(plan).__name__}")
    text = render_chunk(chunk)
    plan = _clean(plan)
    return f"{text}\nPlan: {plan}" if plan else text
