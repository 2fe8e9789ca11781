"""Sage (the slow planner) and the SRM Critic: LLM prompts over grounded candidate actions.

Both write free text first (a one-line plan / diagnosis), then pick actions with the LLM's
constrained choice among grounded options, so every buffered action was valid when written.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from metacog_fast.llm.protocol import LLM


@dataclass
class Deliberation:
    """One Sage or Critic call."""

    text: str
    """The plan or diagnosis the LLM wrote."""
    actions: list[str]
    """Actions for the FIFO buffer, in order."""


def _history(history: list[tuple[str, str]]) -> str:
    if not history:
        return "(no steps yet)\n"
    return "".join(f"> {a}\n{o.strip()[:160]}\n" for a, o in history)


def _memories(memories: list[str]) -> str:
    if not memories:
        return ""
    return "Earlier experience that may help:\n" + "".join(f"- {m[:200]}\n" for m in memories)


def sage_prompt(task: str, observation: str, history: list[tuple[str, str]], memories: list[str],
                options: list[str]) -> str:
    return (
        "You control an agent in a text-based science lab. Think about what the task needs next.\n"
        f"TASK: {task.strip()[:500]}\n"
        f"RECENT STEPS:\n{_history(history)}"
        f"NOW: {observation.strip()[:300]}\n"
        f"{_memories(memories)}"
        f"POSSIBLE ACTIONS: {'; '.join(options)}\n"
        "Write a short plan for the next steps.\nPLAN:"
    )


def critic_prompt(task: str, history: list[tuple[str, str]], signals: list[str], options: list[str]) -> str:
    return (
        "An agent in a text-based science lab is making no progress.\n"
        f"TASK: {task.strip()[:500]}\n"
        f"RECENT STEPS:\n{_history(history)}"
        f"PROBLEM: {', '.join(s.replace('_', ' ') for s in signals)}.\n"
        f"UNTRIED ACTIONS: {'; '.join(options)}\n"
        "Say in one sentence what went wrong and what to do differently.\nDIAGNOSIS:"
    )


def _first_line(text: str) -> str:
    """The first non-empty line of a generation (small models often open with a newline)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _pick(llm: LLM, prompt: str, options: list[str], n: int) -> list[str]:
    chosen: list[str] = []
    left = list(options)
    for i in range(min(n, len(left))):
        q = prompt + "".join(f"\nACTION {j + 1}: {a}" for j, a in enumerate(chosen)) + f"\nACTION {len(chosen) + 1}:"
        k = llm.choose(q, [" " + a for a in left]).index
        chosen.append(left.pop(k))
    return chosen


class Sage:
    """The slow planner. ``llm``: a :class:`metacog_fast.llm.LLM`."""

    def __init__(self, llm: LLM, plan_tokens: int = 24, n_actions: int = 2) -> None:
        self.llm = llm
        self.plan_tokens = plan_tokens
        self.n_actions = n_actions

    def plan(self, task: str, observation: str, history: list[tuple[str, str]], memories: list[str],
             options: list[str]) -> Deliberation:
        if not options:
            raise ValueError("options: Sage needs at least one grounded candidate action")
        prompt = sage_prompt(task, observation, history, memories, options)
        text = _first_line(self.llm.complete(prompt, max_tokens=self.plan_tokens, stop=["\n\n"])[0].text)
        return Deliberation(text, _pick(self.llm, prompt + " " + text, options, self.n_actions))


class Critic:
    """SRM Critic, called only on stagnation, at most ``budget`` times per episode."""

    def __init__(self, llm: LLM, budget: int = 3, plan_tokens: int = 24) -> None:
        self.llm = llm
        self.budget = budget
        self.plan_tokens = plan_tokens
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    @property
    def exhausted(self) -> bool:
        return self.calls >= self.budget

    def correct(self, task: str, history: list[tuple[str, str]], signals: list[str], options: list[str]) -> Deliberation:
        if self.exhausted:
            raise RuntimeError(f"Critic budget of {self.budget} calls per episode is spent")
        if not signals:
            raise ValueError("signals: the Critic is only invoked on detected stagnation")
        if not options:
            raise ValueError("options: the Critic needs at least one untried grounded action")
        self.calls += 1
        prompt = critic_prompt(task, history, signals, options)
        text = _first_line(self.llm.complete(prompt, max_tokens=self.plan_tokens, stop=["\n\n"])[0].text)
        return Deliberation(text, _pick(self.llm, prompt + " " + text, options, 1))
