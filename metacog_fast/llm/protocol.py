"""The backend protocol: one base class, so validation, budget and accounting are shared.

A backend implements four hooks on token-level prompts it renders itself:
``_generate`` (``n`` samples of a prompt), ``_generate_chat`` (same for chat
messages), ``_score`` (log-likelihood of options after a prompt) and
``_constrained`` (generation restricted to a list of strings; return ``None``
when the backend cannot constrain, and the base class falls back to ``_score``).
"""
from __future__ import annotations

import math
import random
import time
from abc import ABC, abstractmethod
from typing import Any

from metacog_fast.llm.budget import Budget, Usage
from metacog_fast.llm.params import (
    SamplingParams,
    check_messages,
    check_options,
    check_prompt,
    make_params,
)
from metacog_fast.llm.types import CallRecord, Choice, Completion, Message


class ScoreResult:
    """What ``_score`` returns: per-option log-likelihoods plus accounting."""

    __slots__ = ("logprobs", "prompt_tokens", "option_tokens", "prefill_seconds", "cached_tokens")

    def __init__(
        self,
        logprobs: list[float],
        prompt_tokens: int,
        option_tokens: int,
        prefill_seconds: float | None = None,
        cached_tokens: int | None = None,
    ) -> None:
        self.logprobs = logprobs
        self.prompt_tokens = prompt_tokens
        self.option_tokens = option_tokens
        self.prefill_seconds = prefill_seconds
        self.cached_tokens = cached_tokens


class LLM(ABC):
    """A language-model backend. Obtain one with :func:`metacog_fast.llm.open_llm`.

    Every call is validated, checked against :attr:`budget`, counted in
    :attr:`usage` and recorded in :attr:`history` (most recent last).
    """

    uri: str
    """The resolved backend URI."""

    def __init__(self, *, budget: Budget | None = None, seed: int = 0, history_size: int = 1000) -> None:
        self.budget = budget
        self.usage = Usage()
        self.history: list[CallRecord] = []
        self._history_size = history_size
        self._closed = False
        # Generated tokens a backend could not attribute to single samples (a server reporting
        # only the total of n samples); added to the call's record.
        self._unattributed_tokens = 0
        # Seeds for calls with seed=None: reproducible per backend instance.
        self._rng = random.Random(seed)

    # ---------------------------------------------------------------- public API
    def complete(
        self,
        prompt: str,
        *,
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 64,
        stop: str | list[str] | None = None,
        seed: int | None = None,
        choices: list[str] | None = None,
    ) -> list[Completion]:
        """Continue ``prompt``; returns ``n`` samples.

        With ``choices``, every sample's text is exactly one of them (see
        :meth:`generate_choice`); ``stop`` must then be ``None`` and
        ``max_tokens`` is raised as needed to fit the longest option.
        """
        check_prompt(prompt)
        params = self._params(n, temperature, top_p, max_tokens, stop, seed)
        if choices is not None:
            return self._choice_call("complete", prompt, None, check_options(choices, "choices"), params)
        return self._call("complete", lambda: self._generate(prompt, params), params.n)

    def chat(
        self,
        messages: list[Message],
        *,
        n: int = 1,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 64,
        stop: str | list[str] | None = None,
        seed: int | None = None,
        choices: list[str] | None = None,
    ) -> list[Completion]:
        """Answer a conversation (the model's chat template applied); same return as :meth:`complete`."""
        msgs = check_messages(messages)
        params = self._params(n, temperature, top_p, max_tokens, stop, seed)
        if choices is not None:
            return self._choice_call("chat", None, msgs, check_options(choices, "choices"), params)
        return self._call("chat", lambda: self._generate_chat(msgs, params), params.n)

    def generate_choice(self, prompt: str, choices: list[str], **kwargs: Any) -> Completion:
        """One sample of ``prompt`` constrained to be exactly one of ``choices``."""
        return self.complete(prompt, choices=choices, **kwargs)[0]

    def choose(self, prompt: str, options: list[str]) -> Choice:
        """Rank ``options`` by the model's total log-likelihood as continuations of ``prompt``.

        Options are tokenized on their own (no BOS) and appended to the
        prompt's tokens, so include any separating space in the option.
        Returns ``Choice(index, logprobs)``; ties go to the lowest index.
        """
        check_prompt(prompt)
        opts = check_options(options)
        self._ensure_open()
        self.usage.check(self.budget)
        t0 = time.perf_counter()
        res = self._score(prompt, opts)
        dt = time.perf_counter() - t0
        best = max(range(len(opts)), key=lambda i: (res.logprobs[i], -i))
        self._record(
            CallRecord(
                kind="choose",
                prompt_tokens=res.prompt_tokens + res.option_tokens,
                completion_tokens=0,
                seconds=dt,
                n=len(opts),
                prefill_seconds=res.prefill_seconds,
                cached_tokens=res.cached_tokens,
            )
        )
        return Choice(best, list(res.logprobs))

    def close(self) -> None:
        """Release the model or connection (idempotent); later calls raise RuntimeError."""
        self._closed = True

    def _ensure_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"LLM backend {getattr(self, 'uri', type(self).__name__)} is closed")

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- hooks
    @abstractmethod
    def _generate(self, prompt: str, params: SamplingParams) -> list[Completion]: ...

    @abstractmethod
    def _generate_chat(self, messages: list[Message], params: SamplingParams) -> list[Completion]: ...

    @abstractmethod
    def _score(self, prompt: str, options: list[str]) -> ScoreResult: ...

    def _constrained(
        self, prompt: str | None, messages: list[Message] | None, choices: list[str], params: SamplingParams
    ) -> list[Completion] | None:
        """Generation restricted to ``choices``; ``None`` = not supported, use the ``choose`` fallback."""
        return None

    def _chat_prompt_for_scoring(self, messages: list[Message]) -> str:
        """The rendered chat prompt, needed for the ``choose`` fallback of ``chat(choices=)``."""
        raise ValueError(
            f"{type(self).__name__}: chat(choices=...) needs constrained decoding on the server "
            "(GBNF grammar or guided choice) because the chat template is not known here; "
            "render the prompt yourself and call complete(prompt, choices=...)"
        )

    # ---------------------------------------------------------------- internals
    def _params(self, n: Any, temperature: Any, top_p: Any, max_tokens: Any, stop: Any, seed: Any) -> SamplingParams:
        params = make_params(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, stop=stop, seed=seed)
        if params.seed is None:
            params = SamplingParams(
                n=params.n,
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_tokens,
                stop=params.stop,
                seed=self._rng.randrange(0, 2**31),
            )
        return params

    def _call(self, kind: str, fn: Any, n: int) -> list[Completion]:
        self._ensure_open()
        self.usage.check(self.budget)
        self._unattributed_tokens = 0
        t0 = time.perf_counter()
        out: list[Completion] = fn()
        dt = time.perf_counter() - t0
        first = out[0]
        self._record(
            CallRecord(
                kind=kind,
                prompt_tokens=first.prompt_tokens,
                completion_tokens=sum(c.completion_tokens or 0 for c in out) + self._unattributed_tokens,
                seconds=dt,
                n=n,
                prefill_seconds=first.prefill_seconds,
                cached_tokens=first.cached_tokens,
            )
        )
        return out

    def _record(self, rec: CallRecord) -> None:
        self.usage.add(rec.kind, rec.prompt_tokens, rec.completion_tokens, rec.seconds)
        self.history.append(rec)
        if len(self.history) > self._history_size:
            del self.history[: len(self.history) - self._history_size]

    def _choice_call(
        self, kind: str, prompt: str | None, messages: list[Message] | None, choices: list[str], params: SamplingParams
    ) -> list[Completion]:
        if params.stop:
            raise ValueError("stop: must be None when choices are given (the output is exactly one of the choices)")

        def run() -> list[Completion]:
            out = self._constrained(prompt, messages, choices, params)
            if out is not None:
                return out
            scored_prompt = prompt if prompt is not None else self._chat_prompt_for_scoring(messages or [])
            return self._choose_fallback(scored_prompt, choices, params)

        return self._call(kind, run, params.n)

    def _choose_fallback(self, prompt: str, choices: list[str], params: SamplingParams) -> list[Completion]:
        """Constrained generation by likelihood ranking: argmax at temperature 0, else sampled
        from softmax(logprob / temperature) over the options (seeded)."""
        t0 = time.perf_counter()
        res = self._score(prompt, choices)
        dt = time.perf_counter() - t0
        if params.temperature == 0.0:
            best = max(range(len(choices)), key=lambda i: (res.logprobs[i], -i))
            picks = [best] * params.n
        else:
            m = max(res.logprobs)
            weights = [math.exp((lp - m) / params.temperature) for lp in res.logprobs]
            rng = random.Random(params.seed)
            picks = rng.choices(range(len(choices)), weights=weights, k=params.n)
        return [
            Completion(
                text=choices[i],
                prompt_tokens=res.prompt_tokens,
                completion_tokens=0,
                seconds=dt if k == 0 else 0.0,
                finish_reason="stop",
                prefill_seconds=res.prefill_seconds if k == 0 else None,
                cached_tokens=res.cached_tokens,
                choice_index=i,
                constrained_by="choose",
            )
            for k, i in enumerate(picks)
        ]


def choices_from_texts(completions: list[Completion], choices: list[str], how: str) -> list[Completion] | None:
    """Tag completions with the option they equal; ``None`` if any is not exactly an option."""
    index = {c: i for i, c in enumerate(choices)}
    out = []
    for c in completions:
        i = index.get(c.text)
        if i is None:
            return None
        out.append(
            Completion(
                text=c.text,
                prompt_tokens=c.prompt_tokens,
                completion_tokens=c.completion_tokens,
                seconds=c.seconds,
                finish_reason="stop",
                prefill_seconds=c.prefill_seconds,
                decode_seconds=c.decode_seconds,
                cached_tokens=c.cached_tokens,
                choice_index=i,
                constrained_by=how,
            )
        )
    return out
