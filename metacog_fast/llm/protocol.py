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
from typing import Any, Sequence

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
        logprobs: bool = False,
    ) -> list[Completion]:
        """Continue ``prompt``; returns ``n`` samples.

        With ``choices``, every sample's text is exactly one of them (see
        :meth:`generate_choice`); ``stop`` must then be ``None`` and
        ``max_tokens`` is raised as needed to fit the longest option.
        ``logprobs``: fill each sample's ``token_logprobs`` (backends with
        :attr:`supports_logprobs` only; not with ``choices``).
        """
        check_prompt(prompt)
        params = self._params(n, temperature, top_p, max_tokens, stop, seed, logprobs)
        if choices is not None:
            if params.logprobs:
                raise ValueError("logprobs: not available with choices (use choose() for option log-likelihoods)")
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

    def generate_many(
        self,
        prompts: Sequence[str],
        *,
        temperature: float | Sequence[float] = 0.0,
        top_p: float | Sequence[float] = 1.0,
        max_tokens: int | Sequence[int] = 64,
        stop: str | list[str] | None | Sequence[str | list[str] | None] = None,
        seed: int | None | Sequence[int | None] = None,
        logprobs: bool = False,
    ) -> list[Completion]:
        """One continuation of each prompt, all in one call (the backend batches them where it can).

        Every setting is one value for all prompts or a list with one value per prompt;
        ``seed=s`` gives prompt ``i`` the seed ``s + i`` (as the ``n`` samples of
        :meth:`complete`), ``None`` draws them from the backend's seeded generator.
        Duplicate prompts (``n`` samples of one prompt) share their prompt evaluation.
        Returns one :class:`Completion` per prompt, in order. The call counts once
        against the budget (like ``n`` samples) and is recorded as kind ``"generate_many"``.
        ``logprobs``: fill every completion's ``token_logprobs`` (as :meth:`complete`).
        """
        plist, params = self._many_params(prompts, temperature, top_p, max_tokens, stop, seed, logprobs)
        self._ensure_open()
        self.usage.check(self.budget)
        t0 = time.perf_counter()
        out = self._generate_many(plist, params)
        dt = time.perf_counter() - t0
        self._record(CallRecord(
            kind="generate_many",
            prompt_tokens=sum(c.prompt_tokens for c in out),
            completion_tokens=sum(c.completion_tokens or 0 for c in out),
            seconds=dt,
            n=len(out),
            prefill_seconds=max((c.prefill_seconds or 0.0) for c in out),
            cached_tokens=sum(c.cached_tokens or 0 for c in out),
        ))
        return out

    def choose_many(self, prompts: Sequence[str], options: Sequence[str] | Sequence[Sequence[str]]) -> list[Choice]:
        """:meth:`choose` for many prompts in one call: ``options`` is one option list for all
        prompts or one list per prompt. Returns one :class:`Choice` per prompt, in order."""
        plist = self._check_prompts(prompts)
        if isinstance(options, str) or not isinstance(options, Sequence) or len(options) == 0:
            raise ValueError(f"options: expected a list of strings or one list per prompt, got {options!r:.80}")
        if all(isinstance(o, str) for o in options):
            shared = check_options(options)
            olist = [shared] * len(plist)
        else:
            if len(options) != len(plist):
                raise ValueError(f"options: expected {len(plist)} option lists (one per prompt), got {len(options)}")
            olist = [check_options(o, f"options[{i}]") for i, o in enumerate(options)]
        self._ensure_open()
        self.usage.check(self.budget)
        t0 = time.perf_counter()
        results = self._score_many(plist, olist)
        dt = time.perf_counter() - t0
        out = []
        for res, opts in zip(results, olist):
            best = max(range(len(opts)), key=lambda i: (res.logprobs[i], -i))
            out.append(Choice(best, list(res.logprobs)))
        self._record(CallRecord(
            kind="choose_many",
            prompt_tokens=sum(r.prompt_tokens + r.option_tokens for r in results),
            completion_tokens=0,
            seconds=dt,
            n=sum(len(o) for o in olist),
            prefill_seconds=results[0].prefill_seconds,
            cached_tokens=sum(r.cached_tokens or 0 for r in results),
        ))
        return out

    supports_logprobs: bool = False
    """Whether ``complete`` / ``generate_many`` can return ``token_logprobs`` (``logprobs=True``);
    a backend without them raises ValueError when asked."""

    @property
    def max_sequences(self) -> int | None:
        """Most prompts one :meth:`generate_many` call takes (``None`` = no limit)."""
        return None

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

    def _generate_many(self, prompts: list[str], params: list[SamplingParams]) -> list[Completion]:
        """One sample per prompt. Default: one ``_generate`` after another (the unbatched path)."""
        return sequential_generate_many(self, prompts, params)

    def _score_many(self, prompts: list[str], options: list[list[str]]) -> list[ScoreResult]:
        """``_score`` of every prompt. Default: one after another (the unbatched path)."""
        return sequential_score_many(self, prompts, options)

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
    def _params(self, n: Any, temperature: Any, top_p: Any, max_tokens: Any, stop: Any, seed: Any,
                logprobs: Any = False) -> SamplingParams:
        params = make_params(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, stop=stop, seed=seed,
                             logprobs=logprobs)
        if params.logprobs and not self.supports_logprobs:
            raise ValueError(f"logprobs: the {type(self).__name__} backend does not return token log-probabilities")
        if params.seed is None:
            params = SamplingParams(
                n=params.n,
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_tokens,
                stop=params.stop,
                seed=self._rng.randrange(0, 2**31),
                logprobs=params.logprobs,
            )
        return params

    @staticmethod
    def _check_prompts(prompts: Any) -> list[str]:
        if isinstance(prompts, str) or not isinstance(prompts, Sequence):
            raise ValueError(f"prompts: expected a list of strings, got {type(prompts).__name__}")
        if len(prompts) == 0:
            raise ValueError("prompts: expected at least one prompt, got an empty list")
        out = list(prompts)
        for i, p in enumerate(out):
            if not isinstance(p, str) or p == "":
                raise ValueError(f"prompts[{i}]: expected a non-empty string, got {p!r:.80}")
        return out

    def _many_params(
        self, prompts: Any, temperature: Any, top_p: Any, max_tokens: Any, stop: Any, seed: Any, logprobs: Any = False
    ) -> tuple[list[str], list[SamplingParams]]:
        plist = self._check_prompts(prompts)
        n = len(plist)

        def per(name: str, value: Any, scalar: Any) -> list[Any]:
            if isinstance(value, scalar) or value is None:
                return [value] * n
            if isinstance(value, (list, tuple)) and name == "stop" and all(isinstance(v, str) for v in value):
                return [list(value)] * n  # one list of stop strings for every prompt
            if not isinstance(value, (list, tuple)) or len(value) != n:
                raise ValueError(f"{name}: expected one value or a list of {n} (one per prompt), got {value!r:.80}")
            return list(value)

        temps = per("temperature", temperature, (int, float))
        tops = per("top_p", top_p, (int, float))
        maxes = per("max_tokens", max_tokens, int)
        stops = per("stop", stop, str)
        if isinstance(seed, int) and not isinstance(seed, bool):
            seeds: list[Any] = [(seed + i) % (2**32 - 1) for i in range(n)]
        else:
            seeds = per("seed", seed, int)
        params = []
        for i in range(n):
            try:
                params.append(self._params(1, temps[i], tops[i], maxes[i], stops[i], seeds[i], logprobs))
            except ValueError as exc:
                if str(exc).startswith("logprobs:"):
                    raise
                raise ValueError(f"prompts[{i}]: {exc}") from None
        return plist, params

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


def sequential_generate_many(llm: LLM, prompts: list[str], params: list[SamplingParams]) -> list[Completion]:
    """One ``_generate`` per prompt, in order: the unbatched path (and the benchmarks' anchor)."""
    return [llm._generate(p, sp)[0] for p, sp in zip(prompts, params)]


def sequential_score_many(llm: LLM, prompts: list[str], options: list[list[str]]) -> list[ScoreResult]:
    """One ``_score`` per prompt, in order: the unbatched path (and the benchmarks' anchor)."""
    return [llm._score(p, o) for p, o in zip(prompts, options)]


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
