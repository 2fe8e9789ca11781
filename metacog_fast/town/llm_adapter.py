"""The simulation's view of an LLM backend (:mod:`metacog_fast.llm`): serialised
access to the embedded model, thread-safe per-run accounting, a per-run call
budget, and robust helpers for ratings, choices and short texts.

``batched=True``: the agents' worker threads do not call the model one after
another; each call waits in a round, and when every registered worker is waiting
(:meth:`SimLLM.expect`), the round goes to the backend as one ``choose_many`` and
one ``generate_many`` (all agents' decisions in one call). :meth:`SimLLM.rate_many`
rates many memories in one ``choose_many``."""
from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from metacog_fast.llm import BudgetExhausted

if TYPE_CHECKING:
    from metacog_fast.llm.protocol import LLM

RATINGS = [f" {i}\n" for i in range(1, 11)]
"""The ten answers to a 1-10 rating prompt, each ended by a newline: " 10" is " 1" followed by
"0", so without the terminator its likelihood can never exceed that of " 1" and every rating
came out 1 (docs/sim.md)."""


def rating_from(logprobs: list[float]) -> int:
    """The rating (1-10): the expected value under the softmax of the ten answers' logprobs,
    rounded. A 135M model's argmax sits on one number for most prompts; the expected value keeps
    its ordering (a zombie bite rates above brushing teeth)."""
    if len(logprobs) != len(RATINGS):
        raise ValueError(f"logprobs: expected {len(RATINGS)} values (one per rating), got {len(logprobs)}")
    m = max(logprobs)
    w = [math.exp(x - m) for x in logprobs]
    return min(10, max(1, int(round(sum((i + 1) * wi for i, wi in enumerate(w)) / sum(w)))))


class StepCancelled(RuntimeError):
    """Raised inside an agent's step job once the step's time budget has passed."""


@dataclass
class LLMCost:
    """What one run spent on the LLM."""

    calls: int = 0
    """Calls made (``choose`` and ``complete``)."""
    prompt_tokens: int = 0
    """Prompt tokens (for choose: prompt plus options)."""
    completion_tokens: int = 0
    """Generated tokens."""
    seconds: float = 0.0
    """Wall time inside the backend (summed over threads)."""
    by_purpose: dict[str, int] = field(default_factory=dict)
    """Calls per purpose (action, importance, progress, meta, reflection, talk, interview, judge...)."""

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "seconds": round(self.seconds, 3), "by_purpose": dict(sorted(self.by_purpose.items()))}


class SimLLM:
    """Thread-safe wrapper of an :class:`metacog_fast.llm.LLM`.

    ``serial=True`` (the embedded llama.cpp backend, which is not thread-safe) puts every
    call behind one lock; HTTP backends run calls from several threads at once.
    ``max_calls`` bounds the calls of one run (``None`` = unlimited); past it, calls raise
    :class:`~metacog_fast.llm.BudgetExhausted` and agents fall back to their current plan.
    """

    def __init__(self, llm: LLM, *, serial: bool | None = None, max_calls: int | None = None,
                 batched: bool = False) -> None:
        self.llm = llm
        uri = str(getattr(llm, "uri", ""))
        self.serial = (not uri.startswith(("http://", "https://"))) if serial is None else serial
        self.batched = batched
        self.max_calls = max_calls
        self.cost = LLMCost()
        self._call_lock = threading.Lock()
        self._acct = threading.Lock()
        self._round = threading.Condition()
        self._pending: list[_Request] = []
        self._workers = 0
        self.rounds = 0
        """Batched rounds sent to the backend (each: at most one choose_many and one generate_many)."""

    def reset(self, max_calls: int | None = None) -> None:
        """Start a new run's accounting."""
        self.cost = LLMCost()
        self.max_calls = max_calls

    @property
    def exhausted(self) -> bool:
        return self.max_calls is not None and self.cost.calls >= self.max_calls

    def _before(self, cancel: threading.Event | None) -> None:
        if cancel is not None and cancel.is_set():
            raise StepCancelled("step time budget passed")
        if self.exhausted:
            raise BudgetExhausted(f"sim LLM call budget spent: {self.cost.calls} calls, max_calls={self.max_calls}")

    def _account(self, purpose: str, prompt_tokens: int, completion_tokens: int, seconds: float) -> None:
        with self._acct:
            c = self.cost
            c.calls += 1
            c.prompt_tokens += int(prompt_tokens or 0)
            c.completion_tokens += int(completion_tokens or 0)
            c.seconds += seconds
            c.by_purpose[purpose] = c.by_purpose.get(purpose, 0) + 1

    # ---------------------------------------------------------------- batched rounds
    def expect(self, n: int) -> None:
        """``n`` more worker threads will make calls; register them BEFORE starting them, so that
        no round leaves before all of them have had their say. Each calls :meth:`leave` when done."""
        with self._round:
            self._workers += n

    def leave(self) -> None:
        """A worker registered with :meth:`expect` makes no more calls (a waiting round may go)."""
        with self._round:
            self._workers -= 1
            self._maybe_dispatch()

    def _submit(self, req: "_Request") -> Any:
        with self._round:
            self._pending.append(req)
            self._maybe_dispatch()
            while not req.done:
                self._round.wait()
        if req.error is not None:
            raise req.error
        return req.result

    def _maybe_dispatch(self) -> None:
        # called with self._round held: run the round once every registered worker is waiting
        if not self._pending or len(self._pending) < self._workers:
            return
        batch, self._pending = self._pending, []
        self.rounds += 1
        try:
            self._run_round(batch)
        except BaseException as exc:  # noqa: BLE001 - every waiter gets the error
            for r in batch:
                if not r.done:
                    r.error, r.done = exc, True
        self._round.notify_all()

    def _run_round(self, batch: list["_Request"]) -> None:
        chooses = [r for r in batch if r.kind == "choose"]
        texts = [r for r in batch if r.kind == "text"]
        if chooses:
            t0 = time.perf_counter()
            res = self.llm.choose_many([r.prompt for r in chooses], [r.options for r in chooses])
            dt = time.perf_counter() - t0
            tokens = _last_prompt_tokens(self.llm)
            for r, c in zip(chooses, res):
                r.result, r.done = c, True
                self._account(r.purpose, tokens // len(chooses), 0, dt / len(chooses))
        size = getattr(self.llm, "max_sequences", None) or max(1, len(texts))
        for off in range(0, len(texts), size):  # the backend's limit of sequences per call
            part = texts[off: off + size]
            t0 = time.perf_counter()
            out = self.llm.generate_many([r.prompt for r in part], temperature=[r.kw["temperature"] for r in part],
                                         max_tokens=[r.kw["max_tokens"] for r in part],
                                         stop=[r.kw["stop"] for r in part], seed=[r.kw["seed"] for r in part])
            dt = time.perf_counter() - t0
            for r, c in zip(part, out):
                r.result, r.done = c, True
                self._account(r.purpose, c.prompt_tokens, c.completion_tokens or 0, dt / len(part))

    def rate_many(self, prompts: list[str], purpose: str) -> list[int]:
        """1-10 ratings of many prompts in one ``choose_many`` (see :meth:`rate`)."""
        if not prompts:
            return []
        if self.exhausted:
            raise BudgetExhausted(f"sim LLM call budget spent: {self.cost.calls} calls, max_calls={self.max_calls}")
        t0 = time.perf_counter()
        with self._call_lock:
            res = self.llm.choose_many(prompts, RATINGS)
            tokens = _last_prompt_tokens(self.llm)
        dt = time.perf_counter() - t0
        for _ in prompts:
            self._account(purpose, tokens // len(prompts), 0, dt / len(prompts))
        return [rating_from(c.logprobs) for c in res]

    def choose(self, prompt: str, options: list[str], purpose: str, cancel: threading.Event | None = None) -> int:
        """Index of the most likely option (``LLM.choose``)."""
        return int(self.choice(prompt, options, purpose, cancel).index)

    def choice(self, prompt: str, options: list[str], purpose: str, cancel: threading.Event | None = None) -> Any:
        """``LLM.choose`` result (index and every option's logprob), accounted."""
        self._before(cancel)
        if self.batched:
            return self._submit(_Request("choose", prompt, purpose, options=list(options)))
        t0 = time.perf_counter()
        if self.serial:
            with self._call_lock:
                self._before(cancel)
                res = self.llm.choose(prompt, options)
                tokens = _last_prompt_tokens(self.llm)
        else:
            res = self.llm.choose(prompt, options)
            tokens = _last_prompt_tokens(self.llm)  # approximate under concurrency
        self._account(purpose, tokens, 0, time.perf_counter() - t0)
        return res

    def rate(self, prompt: str, purpose: str, cancel: threading.Event | None = None) -> int:
        """A 1-10 rating of ``prompt`` from the ten answers' likelihoods (:func:`rating_from`)."""
        return rating_from(self.choice(prompt, RATINGS, purpose, cancel).logprobs)

    def text(self, prompt: str, purpose: str, max_tokens: int = 32, stop: list[str] | None = None,
             cancel: threading.Event | None = None, temperature: float = 0.0, seed: int | None = None) -> str:
        """A short completion, cleaned to one line (may be empty when the model says nothing usable)."""
        self._before(cancel)
        t0 = time.perf_counter()
        # Small models often open with a newline: stop only at a blank line (or the caller's
        # non-newline stops) and keep the first non-empty line.
        stops = [s for s in (stop or []) if s != "\n"] + ["\n\n"]
        kw = dict(max_tokens=max_tokens, stop=stops, temperature=temperature, seed=seed)
        if self.batched:
            return clean_line(self._submit(_Request("text", prompt, purpose, kw=kw)).text)
        if self.serial:
            with self._call_lock:
                self._before(cancel)
                out = self.llm.complete(prompt, **kw)
        else:
            out = self.llm.complete(prompt, **kw)
        c = out[0]
        self._account(purpose, c.prompt_tokens, c.completion_tokens or 0, time.perf_counter() - t0)
        return clean_line(c.text)


class _Request:
    """One agent's call waiting for its round."""

    __slots__ = ("kind", "prompt", "purpose", "options", "kw", "result", "error", "done")

    def __init__(self, kind: str, prompt: str, purpose: str, options: list[str] | None = None,
                 kw: dict[str, Any] | None = None) -> None:
        self.kind, self.prompt, self.purpose = kind, prompt, purpose
        self.options, self.kw = options, kw
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False


def _last_prompt_tokens(llm: LLM) -> int:
    hist = getattr(llm, "history", None)
    return int(hist[-1].prompt_tokens) if hist else 0


_WS = re.compile(r"\s+")


def clean_line(text: str, limit: int = 200) -> str:
    """First line of ``text``, whitespace collapsed, quotes and list markers stripped, at most ``limit`` chars."""
    t = next((ln for ln in text.split("\n") if ln.strip(" \t:-*\"")), "")
    t = _WS.sub(" ", t).strip().strip('"').strip()
    t = re.sub(r"^(\d+[.)]|[-*•:])\s*", "", t).strip()
    return t[:limit].strip()
