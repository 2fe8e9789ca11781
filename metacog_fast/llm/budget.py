"""Per-run call/token budget for LLM backends."""
from __future__ import annotations

from dataclasses import dataclass, field


class BudgetExhausted(RuntimeError):
    """A backend call was refused because the run's :class:`Budget` is spent."""


@dataclass
class Budget:
    """Limits for one run; ``None`` means unlimited.

    A call is refused (``BudgetExhausted``) once either limit has been reached
    before it starts; the call that crosses a limit still completes, so the
    totals may exceed the limit by at most one call's tokens.
    """

    max_calls: int | None = None
    """Most backend calls (``complete``, ``chat``, ``choose``; ``n`` samples count as one call)."""
    max_tokens: int | None = None
    """Most tokens, prompt plus generated, summed over all calls."""

    def __post_init__(self) -> None:
        for name in ("max_calls", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ValueError(f"Budget.{name}: expected a non-negative int or None, got {value!r}")


@dataclass
class Usage:
    """Running totals of one backend."""

    calls: int = 0
    """Calls made."""
    prompt_tokens: int = 0
    """Prompt tokens, all calls."""
    completion_tokens: int = 0
    """Generated tokens, all calls."""
    seconds: float = 0.0
    """Wall time, all calls."""
    by_kind: dict[str, int] = field(default_factory=dict)
    """Calls per kind (``complete``, ``chat``, ``choose``)."""

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def check(self, budget: Budget | None) -> None:
        """Raise :class:`BudgetExhausted` if ``budget`` is spent."""
        if budget is None:
            return
        if budget.max_calls is not None and self.calls >= budget.max_calls:
            raise BudgetExhausted(
                f"LLM call budget spent: {self.calls} calls made, Budget.max_calls={budget.max_calls}"
            )
        if budget.max_tokens is not None and self.total_tokens >= budget.max_tokens:
            raise BudgetExhausted(
                f"LLM token budget spent: {self.total_tokens} tokens used, Budget.max_tokens={budget.max_tokens}"
            )

    def add(self, kind: str, prompt_tokens: int, completion_tokens: int, seconds: float) -> None:
        self.calls += 1
        self.prompt_tokens += prompt_tokens
        self.completion_tokens += completion_tokens
        self.seconds += seconds
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
