"""Prompt assembly of every agent (our own wording).

The actor prompt is a plain completion prompt (SmolLM2 continues transcripts more reliably
than it follows chat instructions): an instruction, few-shot examples of the same task type,
optional notes from earlier attempts, then the current episode as ``> action`` /
observation lines, ending with ``> `` for the next command.
"""
from __future__ import annotations

from typing import Any, Sequence

from metacog_fast.alfworld.fewshot import render_example

INSTRUCTION = (
    "You control a helper robot in a house. Type one command per line after \">\" to finish the task. "
    "A line starting with \"think:\" is for reasoning; it does not change the room."
)


def actor_prefix(examples: Sequence[dict[str, Any]], intro: str, notes: Sequence[str] = (),
                 plan: str | None = None) -> str:
    """The fixed part of an episode's actor prompt (examples, notes, first observation, plan)."""
    n = len(examples)
    parts = [INSTRUCTION]
    if n:  # a fine-tuned actor is prompted without examples
        parts.append("Here is 1 finished example." if n == 1 else f"Here are {n} finished examples.")
    for i, ex in enumerate(examples):
        parts.append(f"### Example {i + 1}\n{render_example(ex, with_plan=plan is not None)}")
    if notes:
        parts.append("Notes from your earlier attempts at this task:\n" + "\n".join(f"- {n}" for n in notes))
    head = f"### Your turn\n{intro}"
    if plan is not None:
        head += f"\nPlan: {plan}"
    parts.append(head)
    return "\n\n".join(parts) + "\n"


def history_text(lines: Sequence[tuple[str, str]]) -> str:
    """``> action`` / observation lines of the episode so far (think lines included)."""
    return "".join(f"> {a}\n{o}\n" for a, o in lines)


def plan_prompt(examples: Sequence[dict[str, Any]], intro: str, notes: Sequence[str] = ()) -> str:
    """MUSE's initial-plan prompt: each example's task and plan, then the new task and "Plan: 1."."""
    parts = ["Write a short numbered plan for a household task."]
    for ex in examples:
        parts.append(f"{_task_line(ex['intro'])}\nPlan: {ex['plan']}")
    if notes:
        parts.append("Notes from earlier attempts:\n" + "\n".join(f"- {n}" for n in notes))
    parts.append(f"{_task_line(intro)}\nPlan: 1.")
    return "\n\n".join(parts)


def replan_prompt(examples: Sequence[dict[str, Any]], intro: str, pairs: Sequence[tuple[str, str]],
                  notes: Sequence[str] = ()) -> str:
    """MUSE's mid-episode plan (the competence trigger's "replan"): the plan prompt with the episode's
    last steps and the request for a new plan from where the agent stands, ending in "New plan: 1."."""
    head = plan_prompt(examples, intro, notes)
    head = head[: head.rindex("\nPlan: 1.")]
    return (f"{head}\nSteps so far:\n{trajectory_tail(pairs, 6)}"
            "The steps so far are not working. Write a new plan from here.\nNew plan: 1.")


def _task_line(intro: str) -> str:
    for line in intro.splitlines():
        if line.startswith("Your task is to:"):
            return line
    return intro.splitlines()[-1] if intro else ""


def trajectory_tail(pairs: Sequence[tuple[str, str]], last: int = 10) -> str:
    """The last ``last`` action/observation pairs as transcript lines (for reflections)."""
    tail = list(pairs)[-last:]
    return "".join(f"> {a}\n{o}\n" for a, o in tail)


def reflection_messages(task: str, pairs: Sequence[tuple[str, str]], won: bool) -> list[dict[str, str]]:
    """Reflexion: feedback after a success or a failure, one or two sentences."""
    outcome = "You finished the task." if won else "You did not finish the task within the step limit."
    ask = ("Say in one or two sentences what to repeat next time." if won
           else "Say in one or two sentences what went wrong and what to do differently next time.")
    return [
        {"role": "system", "content": "You review a household robot's attempt and give short, concrete advice."},
        {"role": "user", "content": f"{task}\nEnd of the attempt:\n{trajectory_tail(pairs)}{outcome} {ask}"},
    ]


def experience_messages(task: str, pairs: Sequence[tuple[str, str]], won: bool) -> list[dict[str, str]]:
    """FCRF Mentor: valuable-experience summary (what was useful: places visited, objects found)."""
    outcome = "succeeded" if won else "failed"
    return [
        {"role": "system", "content": "You are a mentor. You keep only the useful facts from a robot's attempt."},
        {"role": "user", "content": f"{task}\nThe robot {outcome}. End of its attempt:\n{trajectory_tail(pairs)}"
                                    "In one sentence, list the useful facts (where things are, which steps worked)."},
    ]


def lesson_prompt(task: str, task_type: str, pairs: Sequence[tuple[str, str]]) -> str:
    """FCRF Mentor: the prompt after which each lesson-pool entry is scored as a continuation."""
    return (f"A robot failed this {task_type.replace('_', ' ')} task.\n{task}\nEnd of its attempt:\n"
            f"{trajectory_tail(pairs, 6)}The most likely reason for the failure is this tip:")


def plan_messages(task: str, experience: str, lesson: str | None) -> list[dict[str, str]]:
    """FCRF Mentor: plan for the next attempt built from the experience (and the lesson)."""
    body = f"{task}\nUseful facts: {experience}\n"
    if lesson:
        body += f"Lesson: {lesson}\n"
    body += "Write a numbered plan of at most four short steps for the next attempt."
    return [
        {"role": "system", "content": "You are a mentor who plans a household robot's next attempt."},
        {"role": "user", "content": body},
    ]


def new_lesson_messages(task_type: str, failed: Sequence[tuple[str, str]], won: Sequence[tuple[str, str]]
                        ) -> list[dict[str, str]]:
    """FCRF Mentor: one general tip from a fail -> success pair of attempts at the same task."""
    return [
        {"role": "system", "content": "You are a mentor. You write one general tip for a type of household task."},
        {"role": "user", "content": f"Task type: {task_type.replace('_', ' ')}.\nA failed attempt ended with:\n"
                                    f"{trajectory_tail(failed, 6)}A later successful attempt ended with:\n"
                                    f"{trajectory_tail(won, 6)}Write one sentence: a general tip that explains the difference."},
    ]
