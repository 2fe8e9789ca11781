"""Validation of call arguments: bad input fails here with a message naming the argument."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from metacog_fast.llm.types import Message

MAX_SEED = 2**32 - 2  # llama.cpp reserves 0xFFFFFFFF for "random seed"


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings of one call (already validated)."""

    n: int = 1
    """Samples to return."""
    temperature: float = 0.0
    """0 = greedy; otherwise softmax temperature (no top-k, min-p or repeat penalty)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]."""
    max_tokens: int = 64
    """Most tokens generated per sample."""
    stop: tuple[str, ...] = ()
    """Stop strings; generation ends before the first one and the text excludes it."""
    seed: int | None = None
    """Seed of sample 0 (sample i uses seed + i); ``None`` draws one from the backend's seeded generator."""
    logprobs: bool = False
    """Also return each generated token's log-probability under the model (``Completion.token_logprobs``)."""


def check_prompt(prompt: Any) -> str:
    if not isinstance(prompt, str):
        raise TypeError(f"prompt: expected a str, got {type(prompt).__name__}")
    if prompt == "":
        raise ValueError("prompt: expected a non-empty string, got ''")
    return prompt


def check_messages(messages: Any) -> list[Message]:
    if not isinstance(messages, (list, tuple)) or len(messages) == 0:
        raise ValueError(f"messages: expected a non-empty list of {{'role', 'content'}} dicts, got {messages!r:.80}")
    out: list[Message] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise ValueError(f"messages[{i}]: expected a dict with str 'role' and str 'content', got {m!r:.80}")
        if m["role"] not in ("system", "user", "assistant"):
            raise ValueError(f"messages[{i}].role: expected 'system', 'user' or 'assistant', got {m['role']!r}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def check_options(options: Any, name: str = "options") -> list[str]:
    if isinstance(options, str) or not isinstance(options, Sequence) or len(options) == 0:
        raise ValueError(f"{name}: expected a non-empty list of strings, got {options!r:.80}")
    out = list(options)
    for i, o in enumerate(out):
        if not isinstance(o, str) or o == "":
            raise ValueError(f"{name}[{i}]: expected a non-empty string, got {o!r:.80}")
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: options must be distinct, got duplicates in {out!r:.120}")
    return out


def make_params(
    *, n: Any, temperature: Any, top_p: Any, max_tokens: Any, stop: Any, seed: Any, logprobs: Any = False
) -> SamplingParams:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected an int >= 1, got {n!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature: expected a finite float >= 0, got {temperature!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not (0.0 < top_p <= 1.0):
        raise ValueError(f"top_p: expected a float in (0, 1], got {top_p!r}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens: expected an int >= 1, got {max_tokens!r}")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, (list, tuple)):
        stops = tuple(stop)
    else:
        raise ValueError(f"stop: expected None, a string or a list of strings, got {stop!r:.80}")
    for i, s in enumerate(stops):
        if not isinstance(s, str) or s == "":
            raise ValueError(f"stop[{i}]: expected a non-empty string, got {s!r:.80}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise ValueError(f"seed: expected None or an int in [0, {MAX_SEED}], got {seed!r}")
    if not isinstance(logprobs, bool):
        raise ValueError(f"logprobs: expected a bool, got {logprobs!r:.80}")
    return SamplingParams(n=n, temperature=float(temperature), top_p=float(top_p), max_tokens=max_tokens, stop=stops,
                          seed=seed, logprobs=logprobs)


def find_stop(text: str, stops: tuple[str, ...]) -> int:
    """Index of the earliest stop string in ``text``, or -1."""
    best = -1
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best < 0 or i < best):
            best = i
    return best
