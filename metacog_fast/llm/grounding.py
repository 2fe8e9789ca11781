"""Grounding an LLM's proposed action in an environment's admissible commands: shared by the agents
(ALFWorld's, the experience agent's), so that no agent package imports another.

Modes (``map_actions`` / ``action_grounding`` of the agents' configs):

* ``"none"``   the cleaned text is sent as is (ALFWorld answers "Nothing happens." to invalid ones);
* ``"embed"``  exact match first, else the admissible command nearest by MiniLM cosine;
* ``"choose"`` exact match first, else the LLM's likelihood ranking of the admissible commands as
  continuations of the actor prompt (``LLM.choose``).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:
    from metacog_fast.llm.protocol import LLM


class TextEncoder(Protocol):
    """What the ``"embed"`` mode needs of an encoder (MiniLMEncoder has it)."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """texts [n] -> embeddings [n, dim] float32."""
        ...


def clean_action(text: str) -> str:
    """First line of a generation, without a leading ``>``, trailing period or extra spaces."""
    line = text.strip().split("\n", 1)[0].strip()
    while line.startswith(">"):
        line = line[1:].strip()
    line = line.rstrip(".").strip()
    return " ".join(line.split())



@dataclass
class Mapped:
    """A proposed action after the mapping."""

    action: str
    """Command sent to the environment."""
    proposed: str
    """Cleaned LLM text."""
    how: str
    """"exact", "embed", "choose" or "raw"."""
    seconds: float
    """Wall time of the mapping (LLM time of "choose" included; subtract it for agent time)."""


class ActionMapper:
    """Maps proposals to admissible commands according to ``mode``."""

    def __init__(self, mode: str, encoder: TextEncoder | None = None, llm: LLM | None = None) -> None:
        if mode not in ("embed", "choose", "none"):
            raise ValueError(f"mode: expected 'embed', 'choose' or 'none', got {mode!r}")
        if mode == "embed" and encoder is None:
            raise ValueError("encoder: mode 'embed' needs a MiniLM encoder")
        if mode == "choose" and llm is None:
            raise ValueError("llm: mode 'choose' needs the LLM")
        self.mode, self.encoder, self.llm = mode, encoder, llm

    def map(self, proposed: str, admissible: Sequence[str] | None, prompt: str = "") -> Mapped:
        t0 = time.perf_counter()
        prop = clean_action(proposed)
        if self.mode == "none" or not admissible:
            return Mapped(prop or "look", prop, "raw", time.perf_counter() - t0)
        adm = list(admissible)
        low = {a.lower(): a for a in adm}
        if prop.lower() in low:
            return Mapped(low[prop.lower()], prop, "exact", time.perf_counter() - t0)
        if self.mode == "embed":
            e = self.encoder.encode(adm + [prop or "look"])
            e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
            i = int(np.argmax(e[:-1] @ e[-1]))
            return Mapped(adm[i], prop, "embed", time.perf_counter() - t0)
        choice = self.llm.choose(prompt, [" " + a for a in adm])
        return Mapped(adm[choice.index], prop, "choose", time.perf_counter() - t0)

    def _admissible_unit(self, adm: list[str]) -> np.ndarray:
        """Unit-norm embeddings [len(adm), 384] of the admissible list, kept for the last list seen
        (it is the same for every rollout of a step, and often across steps)."""
        key = tuple(adm)
        if getattr(self, "_adm_key", None) != key:
            e = self.encoder.encode(adm)
            self._adm_unit = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
            self._adm_key = key
        return self._adm_unit

    def map_many(self, proposed: Sequence[str], admissible: Sequence[str] | None, prompt: str = "") -> list[Mapped]:
        """:meth:`map` of several proposals (one MUSE step's rollouts) against one admissible list.

        Same results as ``[map(p, admissible, prompt) for p in proposed]``; in ``"embed"`` mode the
        proposals that need the encoder are embedded in one batched call (duplicates once) and the
        admissible embeddings are normalised once. ``seconds`` of each result is an equal share of
        the batch's wall time."""
        if isinstance(proposed, str):
            raise TypeError("proposed: expected a sequence of proposals, got a single str (wrap it in a list)")
        if self.mode != "embed" or not admissible:
            return [self.map(p, admissible, prompt) for p in proposed]
        t0 = time.perf_counter()
        adm = list(admissible)
        low = {a.lower(): a for a in adm}
        props = [clean_action(p) for p in proposed]
        out: list[Mapped | None] = [Mapped(low[p.lower()], p, "exact", 0.0) if p.lower() in low else None
                                    for p in props]
        todo = list(dict.fromkeys(p or "look" for p, m in zip(props, out) if m is None))
        if todo:
            e = self.encoder.encode(todo)
            e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
            best = np.argmax(e @ self._admissible_unit(adm).T, axis=1)
            nearest = {t: adm[int(i)] for t, i in zip(todo, best)}
            out = [m if m is not None else Mapped(nearest[p or "look"], p, "embed", 0.0) for p, m in zip(props, out)]
        share = (time.perf_counter() - t0) / max(1, len(out))
        for m in out:
            m.seconds = share
        return out
