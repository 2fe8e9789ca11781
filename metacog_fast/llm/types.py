"""Result and message types shared by every LLM backend."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, TypedDict


class Message(TypedDict):
    """One chat message: ``{"role": "system"|"user"|"assistant", "content": str}``."""

    role: str
    content: str


@dataclass(frozen=True)
class Completion:
    """One generated sample.

    Timing: ``seconds`` is this sample's wall time; ``prefill_seconds`` (prompt
    evaluation up to the first sampled token) and ``decode_seconds`` (the rest)
    are set where the backend reports them, else ``None``. Of the ``n`` samples
    of one call the first carries the prompt prefill; the later ones reuse it.
    """

    text: str
    """The generated text, with the stop string (if one fired) removed."""
    prompt_tokens: int
    """Tokens in the prompt (after the chat template, if any)."""
    completion_tokens: int | None
    """Tokens generated for this sample; ``None`` only when a server reports just the total of ``n`` samples."""
    seconds: float
    """Wall time of this sample (for HTTP: of the request that produced it)."""
    finish_reason: str
    """``"stop"`` (end-of-generation token or stop string) or ``"length"`` (``max_tokens`` reached)."""
    prefill_seconds: float | None = None
    """Prompt evaluation time, where known."""
    decode_seconds: float | None = None
    """Token generation time after the first token, where known."""
    cached_tokens: int | None = None
    """Prompt tokens served from the KV cache instead of being evaluated, where known."""
    choice_index: int | None = None
    """For constrained generation: the index of the option the text equals."""
    constrained_by: str | None = None
    """For constrained generation: ``"grammar"`` (GBNF), ``"guided_choice"`` (vLLM) or ``"choose"`` (fallback: likelihood ranking)."""
    token_logprobs: tuple[float, ...] | None = None
    """With ``logprobs=True``: the natural-log probability of each generated token that makes up ``text``
    (a token holding the stop string is left out unless part of it precedes the stop), under the
    model's own distribution (log-softmax of the logits: no temperature, no top-p); else ``None``."""
    token_ends: tuple[int, ...] | None = None
    """With ``logprobs=True``: the character offset in ``text`` at which each of those tokens ends (the
    last one may end past ``text`` when it holds the start of the stop string); else ``None``."""


class Choice(NamedTuple):
    """Result of :meth:`LLM.choose`: the best option and every option's log-likelihood."""

    index: int
    """Index of the option with the highest total log-likelihood."""
    logprobs: list[float]
    """Total log-likelihood (natural log) of each option as a continuation of the prompt."""


@dataclass(frozen=True)
class CallRecord:
    """What one backend call cost (kept in :attr:`LLM.history`)."""

    kind: str
    """``"complete"``, ``"chat"`` or ``"choose"``."""
    prompt_tokens: int
    """Prompt tokens of the call (for ``choose``: prompt plus scored option tokens)."""
    completion_tokens: int
    """Generated tokens, all samples together (0 for ``choose``)."""
    seconds: float
    """Wall time of the whole call."""
    n: int
    """Samples (``complete``/``chat``) or options (``choose``)."""
    prefill_seconds: float | None = None
    """Prompt evaluation time, where known."""
    cached_tokens: int | None = None
    """Prompt tokens reused from the KV cache, where known."""
