"""Prompt texts of the generative agent. Short, completion-style prompts that a
135M-parameter model can follow: choices are lettered lists scored by
``LLM.choose`` over single-letter continuations, ratings are ``" 1".." 10"``."""
from __future__ import annotations

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def letter_options(n: int) -> list[str]:
    """The continuations scored for a lettered list of ``n`` options: [" A", " B", ...]."""
    if not 1 <= n <= len(LETTERS):
        raise ValueError(f"n: expected 1..{len(LETTERS)} options, got {n}")
    return [f" {LETTERS[i]}" for i in range(n)]


def lettered(options: list[str]) -> str:
    return "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(options))


def bullets(items: list[str], empty: str = "(nothing)") -> str:
    return "\n".join(f"- {t}" for t in items) if items else f"- {empty}"


def header(name: str, description: str, personality: str, premise: str, goal: str, strategy: str) -> str:
    return (f"{description} Personality: {personality}.\n{premise}\n"
            f"{name}'s goal: {goal or 'none yet'}.\n{name}'s strategy: {strategy or 'none yet'}.\n")


def action(head: str, name: str, clock: str, place: str, notices: list[str], memories: list[str],
           options: list[str]) -> str:
    return (f"{head}It is {clock}. {name} is at {place}.\n{name} notices:\n{bullets(notices)}\n"
            f"{name} remembers:\n{bullets(memories)}\nOptions:\n{lettered(options)}\n"
            f"The best option for {name} is option")


def action_text(head: str, name: str, clock: str, place: str, notices: list[str], memories: list[str],
                options: list[str]) -> str:
    """The action prompt whose continuation is the chosen option's own words (see ``choose_text``)."""
    return (f"{head}It is {clock}. {name} is at {place}.\n{name} notices:\n{bullets(notices)}\n"
            f"{name} remembers:\n{bullets(memories)}\n{name} could:\n{bullets(options)}\n"
            f"{name} decides to")


def place_for_text(head: str, name: str, purpose: str, places: list[str]) -> str:
    return f"{head}Places in town:\n{bullets(places)}\n{purpose}\nThe best place for {name} is the"


def importance(name: str, text: str) -> str:
    return (f"On a scale of 1 to 10, where 1 is mundane (brushing teeth) and 10 is life-changing "
            f"(a break-up, danger of death), rate how important this memory is for {name}.\n"
            f"Memory: {text}\nRating:")


def progress(head: str, name: str, memories: list[str]) -> str:
    return (f"{head}Recent memories of {name}:\n{bullets(memories)}\n"
            f"On a scale of 1 (no progress) to 10 (goal reached), how much progress has {name} made "
            f"toward the goal?\nRating:")


def progress_reason(prompt: str, score: int) -> str:
    return f"{prompt} {score}\nReason in one sentence:"


def question(head: str, name: str, memories: list[str], asked: list[str]) -> str:
    prev = bullets(asked[-3:], empty="(none)")
    return (f"{head}Recent thoughts of {name}:\n{bullets(memories)}\n"
            f"Questions {name} already asked:\n{prev}\n"
            f"A new question {name} asks about the situation, the goal or the strategy:\nQuestion:")


def answer(head: str, name: str, q: str, memories: list[str]) -> str:
    return f"{head}{name} remembers:\n{bullets(memories)}\nQuestion: {q}\n{name}'s answer:"


def keep_goal(head: str, name: str, thoughts: list[str]) -> str:
    return (f"{head}{name}'s latest thoughts:\n{bullets(thoughts)}\n"
            f"Should {name} keep the current goal or change it?\nA. keep the goal\nB. change the goal\nAnswer:")


def new_goal(head: str, name: str, thoughts: list[str]) -> str:
    return f"{head}{name}'s latest thoughts:\n{bullets(thoughts)}\n{name}'s new goal is to"


def new_strategy(head: str, name: str, goal: str, thoughts: list[str]) -> str:
    return (f"{head}{name}'s latest thoughts:\n{bullets(thoughts)}\n"
            f"To {goal.removeprefix('to ')}, {name}'s strategy is to")


def place_for(head: str, name: str, purpose: str, places: list[str]) -> str:
    return f"{head}Places in town:\n{lettered(places)}\n{purpose}\nThe best place for {name} is option"


def control(head: str, name: str, place: str, thought: str, options: list[str]) -> str:
    return (f"{head}{name} is at {place} and thinks: {thought}\nWhat {name} could do now:\n{lettered(options)}\n"
            f"The best option for {name} is option")


def control_text(head: str, name: str, place: str, thought: str, options: list[str]) -> str:
    """The control choice of ``meta_cognize`` whose continuation is the chosen option's own words."""
    return (f"{head}{name} is at {place} and thinks: {thought}\nWhat {name} could do now:\n{bullets(options)}\n"
            f"{name} decides to")


def control_bare(name: str, options: list[str]) -> str:
    """The control choice without its situation (who, where, what they think): the baseline of
    ``_pick_pmi``. The options stay listed, so copying a listed option is in both scores."""
    return f"What {name} could do now:\n{bullets(options)}\n{name} decides to"


def reflection(head: str, name: str, memories: list[str]) -> str:
    return (f"{head}Memories of {name}:\n{bullets(memories)}\n"
            f"One high-level insight {name} can infer from these memories:\nInsight:")


def plan(head: str, name: str, memories: list[str]) -> str:
    return f"{head}{name} remembers:\n{bullets(memories)}\n{name}'s plan for the next hour is to"


def say(head: str, name: str, other: str, place: str, memories: list[str]) -> str:
    return f"{head}{name} remembers:\n{bullets(memories)}\n{name} meets {other} at {place} and says: \""


def reply(head: str, name: str, other: str, line: str) -> str:
    return f"{head}{other} says to {name}: \"{line}\"\n{name} replies: \""


def interview(head: str, name: str, q: str, memories: list[str]) -> str:
    return f"{head}{name} remembers:\n{bullets(memories)}\nInterviewer: {q}\n{name}:"
