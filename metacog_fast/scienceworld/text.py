"""Cheap text features shared by the ranker, the memory embedder and the detectors."""
from __future__ import annotations

import re
import zlib

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")
STOP = frozenset("a an the to of in on at and is it you see this that called with".split())


def tokens(text: str) -> list[str]:
    """Lower-case word tokens without stop words."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOP]


def verb(action: str) -> str:
    """The action's verb phrase: first word, or two for "pick up", "look around/at", "focus on" etc."""
    w = action.strip().lower().split()
    if not w:
        return ""
    if len(w) > 1 and w[1] in ("up", "on", "around", "at", "to", "in", "into", "off"):
        return w[0] + " " + w[1]
    return w[0]


def _h(tok: str) -> int:
    return zlib.crc32(tok.encode())


def hash_vec(text: str, dim: int, prefix: str = "") -> np.ndarray:
    """Hashed bag of words (and bigrams) -> [dim] float32, L2-normalised (zeros for empty text)."""
    v = np.zeros(dim, np.float32)
    toks = tokens(text)
    for t in toks:
        v[_h(prefix + t) % dim] += 1.0
    for a, b in zip(toks, toks[1:]):
        v[_h(prefix + a + "_" + b) % dim] += 0.5
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def overlap(a: set[str], b: set[str]) -> float:
    """|a & b| / |a| (0 for empty a)."""
    return len(a & b) / len(a) if a else 0.0


def room_of(observation: str) -> str | None:
    """The room named by a "This room is called the X." observation, or entered by "You move to
    the X." / "You teleport to the X.", else None."""
    low = observation.lower()
    m = re.search(r"room is called the ([a-z ]+?)\.", low) or re.match(r"\s*you (?:move|teleport) to the ([a-z ]+?)\.", low)
    return m.group(1).strip() if m else None
