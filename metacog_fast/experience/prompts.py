"""Prompt texts (written for this project) and prompt assembly within a token budget."""
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Callable, Sequence

from metacog_fast.experience.trajectory import Step, SubTask

if TYPE_CHECKING:
    from metacog_fast.llm.protocol import LLM

TokenCounter = Callable[[str], int]

SYSTEM = ("You control a household robot through text commands. Work on the current sub-task only. "
          "Pick exactly one command per turn. Say 'finish' when the sub-task's goal is visibly reached.")


def approx_tokens(text: str) -> int:
    """Upper estimate of tokens for English text with a BPE vocabulary (~3 characters per token)."""
    return math.ceil(len(text) / 3)


def llm_token_counter(llm: LLM) -> TokenCounter:
    """Exact counts from the embedded model's tokenizer when reachable, else :func:`approx_tokens`."""
    model = getattr(llm, "_llama", None) or getattr(getattr(llm, "_session", None), "llama", None)
    if model is not None and hasattr(model, "tokenize"):
        return lambda t: len(model.tokenize(t.encode("utf-8"), add_bos=False, special=False))
    return approx_tokens


def assemble(fixed_head: Sequence[str], optional: Sequence[str], steps: Sequence[Step], tail: str,
             budget: int, count: TokenCounter = approx_tokens, fixed_focus: Sequence[str] = ()) -> str:
    """Build ``head + optional + focus + recent steps + tail`` with at most ``budget`` tokens.

    ``fixed_head`` (system, commands), ``fixed_focus`` (task, sub-task) and ``tail`` are always
    kept; then as many of the most recent steps as fit (newest kept first); ``optional`` sections
    (memories, in priority order) are dropped from the end first, before any step is dropped below
    the last two. The memories sit before the focus on purpose: placed right before the first
    ``> ``, a small model continues the list of lessons instead of acting (it wrote ``finish`` for 33
    of 34 sub-tasks so). Raises ValueError if the fixed parts alone exceed the budget.
    """
    if budget < 1:
        raise ValueError(f"budget must be >= 1 token, got {budget}")
    head = "\n\n".join(s for s in fixed_head if s)
    focus = "\n\n".join(s for s in fixed_focus if s)
    base = count(head) + (count(focus) + 2 if focus else 0) + count(tail) + 4
    if base > budget:
        raise ValueError(f"prompt budget {budget} tokens is smaller than the fixed sections ({base} tokens)")
    step_txt = [f"> {s.action}\n{s.observation}" + (f"\n(tip: {s.tip})" if s.tip else "") for s in steps]
    step_tok = [count(t) + 1 for t in step_txt]
    opt = list(optional)
    opt_tok = [count(o) + 2 for o in opt]

    def total(n_opt: int, n_steps: int) -> int:
        return base + sum(opt_tok[:n_opt]) + sum(step_tok[len(step_tok) - n_steps:]) if n_steps else \
            base + sum(opt_tok[:n_opt])

    n_steps = len(steps)
    n_opt = len(opt)
    keep_min = min(2, n_steps)
    while total(n_opt, n_steps) > budget and n_steps > keep_min:
        n_steps -= 1
    while total(n_opt, n_steps) > budget and n_opt > 0:
        n_opt -= 1
    while total(n_opt, n_steps) > budget and n_steps > 0:
        n_steps -= 1
    parts = [head] + opt[:n_opt] + ([focus] if focus else [])
    if n_steps:
        shown = step_txt[len(step_txt) - n_steps:]
        if n_steps < len(steps):
            shown = [f"({len(steps) - n_steps} earlier steps omitted)"] + shown
        parts.append("\n".join(shown))
    return "\n\n".join(parts) + "\n" + tail


def strategic_section(lines: Sequence[str]) -> str:
    return "Lessons from earlier tasks:\n" + "\n".join(f"- {x}" for x in lines) if lines else ""


def tools_section(lines: Sequence[str]) -> str:
    return "Commands:\n" + "\n".join(f"- {x}" for x in lines)


def index_section(skills: Sequence[str]) -> str:
    return ("Procedure index (read one with 'access_guide <skill>'):\n" + "\n".join(f"- {s}" for s in skills)
            if skills else "")


def plan_prompt(task: str, observation: str, max_items: int, strategic: Sequence[str], skills: Sequence[str]) -> str:
    # The start observation is left out on purpose: SmolLM2-135M copies it line by line as the "plan".
    del observation
    parts = [f"Household task: {task}"]
    if strategic:
        parts.append(strategic_section(strategic))
    if skills:
        parts.append("Known skills: " + ", ".join(skills))
    parts.append(f"Split the task into at most {max_items} short sub-tasks, one per line, written as\n"
                 "sub-task description => state that shows it is done\n\n" + PLAN_EXAMPLE
                 + f"\n\nHousehold task: {task}\nSub-tasks:\n")
    return "\n\n".join(parts)


PLAN_EXAMPLE = ("Household task: put a cool tomato in the microwave.\nSub-tasks:\n"
                "find the tomato => you see the tomato\ntake the tomato => you hold the tomato\n"
                "cool the tomato with the fridge => you cool the tomato\n"
                "put the tomato in the microwave => you put the tomato in the microwave")
"""One worked plan (a task type and object absent from the committed subsets): without it SmolLM2-135M
answers with the task itself as its only sub-task, so no intermediate sub-task can ever be accepted.
Lines copied verbatim from it are dropped by the copy filter."""


def replan_prompt(task: str, done: Sequence[tuple[str, bool]], remaining: Sequence[SubTask], last_obs: str,
                  max_items: int) -> str:
    d = "\n".join(f"- {desc} ({'done' if ok else 'failed'})" for desc, ok in done) or "- none"
    r = "\n".join(f"{s.description} => {s.goal}" for s in remaining) or "(empty)"
    return (f"Household task: {task}\nSub-tasks so far:\n{d}\nLast observation: {last_obs.strip()[:400]}\n"
            f"Current remaining plan:\n{r}\n\nRewrite the remaining plan (at most {max_items} lines, "
            "format 'description => done-state'); repeat it unchanged if it is still right.\nRemaining sub-tasks:\n")


def strategy_prompt(task: str, dilemma: str) -> str:
    return (f"A robot worked on: {task}\nProblem seen: {dilemma}\n"
            "Give one short general rule (one sentence) that avoids this problem next time.\nRule:")


_LINE = re.compile(r"^\s*(?:[-*\d.)\s]+)?(.+?)\s*=>\s*(.+?)\s*$")
_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*])?\s*(.{3,160}?)\s*$")


def parse_plan(text: str, max_items: int) -> list[SubTask]:
    """Lines ``description => goal`` (list markers allowed); a list line without ``=>`` is a sub-task
    whose goal is its own description. Duplicates and blank lines are dropped."""
    out: list[SubTask] = []
    for line in text.splitlines():
        m = _LINE.match(line)
        st = None
        if m and len(m.group(1)) > 2 and len(m.group(2)) > 2:
            st = SubTask(m.group(1).strip(" ."), m.group(2).strip(" ."))
        elif "=>" not in line and (m2 := _ITEM.match(line)) and any(c.isalpha() for c in m2.group(1)):
            st = SubTask(m2.group(1).strip(" ."), m2.group(1).strip(" ."))
        if st is not None:
            if all(st.description != o.description for o in out):
                out.append(st)
        if len(out) >= max_items:
            break
    return out
