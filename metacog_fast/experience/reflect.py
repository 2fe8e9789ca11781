"""The reflect agent: a checklist verdict per sub-task, and distillation into the three memories.

The checklist is computed from the trajectory and from the environment's own state-reading
actions, not from the acting LLM's say-so (a 135M model's self-judgement is not evidence):

1. **claim**: the agent declared the sub-task finished (``finish``), or the env reported the task won;
2. **traced**: the goal's content words are found in observations that followed *effective* env
   actions of this sub-task (not "Nothing happens."), or in the effective commands themselves
   (at least half of the words, and at least one);
3. **verified**: after the claim, ``look`` and ``inventory`` (ALFWorld; ScienceWorld: ``look around``,
   ``inventory``) are run and their output, with the last effective observation, again contains at
   least half of the goal's words;
4. **expected state**: the env says won, or the sub-task is not the last one and (3) holds; the last
   sub-task needs the env's win.

The flag is (1) and (2) and (4). A claim with no supporting observation fails (2).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from metacog_fast.experience import entries as en
from metacog_fast.experience.trajectory import Step, SubTaskResult, is_failure, template
from metacog_fast.experience.tools import ACCESS_GUIDE, FINISH, VERIFY_ACTIONS, action_type

STOP = set("""a an the of to in on at into onto with from for and or is are be been it its this that
you your there some any then until when find get go put place use make sure state done shows see
seen visible now has have one object thing item""".split())

_WORD = re.compile(r"[a-z]+")
HOLD_WORDS = {"hold", "holding", "held", "carry", "carrying", "take", "taken", "pick", "picked", "have"}
"""Goal words that claim possession: checked against the inventory, not by word overlap."""


def goal_terms(goal: str) -> list[str]:
    """Content words of a goal (stop words and words shorter than 3 letters removed)."""
    out: list[str] = []
    for w in _WORD.findall(goal.lower()):
        if len(w) >= 3 and w not in STOP and w not in HOLD_WORDS and w not in out:
            out.append(w)
    return out


def claims_possession(goal: str) -> bool:
    return bool(HOLD_WORDS & set(_WORD.findall(goal.lower())))


def coverage(terms: Sequence[str], text: str) -> float:
    if not terms:
        return 0.0
    words = set(_WORD.findall(text.lower()))
    # crude stemming: "apples" / "apple", "heated" / "heat"
    stems = words | {w.rstrip("s") for w in words} | {w[:-2] for w in words if w.endswith("ed")}
    return sum(t in stems or t.rstrip("s") in stems for t in terms) / len(terms)


@dataclass
class Verdict:
    """The checklist outcome for one sub-task."""

    flag: bool
    """Accepted as done."""
    checks: dict[str, bool] = field(default_factory=dict)
    """claim, traced, verified, expected_state."""
    report: str = ""
    """Readable explanation."""


StepFn = Callable[[str], str]


def check_subtask(result: SubTaskResult, last: bool, verify: StepFn | None, env_name: str) -> Verdict:
    """Judge one sub-task. ``verify(cmd) -> observation`` runs a state-reading env action (None: no
    active verification possible, e.g. the episode ended); the verification steps are appended to
    ``result.steps`` with kind "verify"."""
    terms = goal_terms(result.subtask.goal) or goal_terms(result.subtask.description)
    effective = [s for s in result.steps if s.kind == "env" and not is_failure(s.observation)]
    evidence = "\n".join(f"{s.action}\n{s.observation}" for s in effective)
    claim = result.claimed or result.won
    traced = result.won or (bool(effective) and coverage(terms, evidence) >= 0.5)
    verified = result.won
    if claim and not result.won and verify is not None:
        seen = [effective[-1].observation] if effective else []
        inventory = ""
        for cmd in VERIFY_ACTIONS.get(env_name, ("look", "inventory")):
            obs = verify(cmd)
            result.steps.append(Step(cmd, obs, "verify"))
            seen.append(obs)
            if cmd == "inventory":
                inventory = obs
        verified = bool(effective) and coverage(terms, "\n".join(seen)) >= 0.5
        if claims_possession(result.subtask.goal):
            # "you hold the mug": the inventory itself must list the object.
            verified = verified and "not carrying" not in inventory.lower() and coverage(terms, inventory) >= 0.5
    expected = result.won or (not last and verified)
    checks = {"claim": claim, "traced": traced, "verified": verified, "expected_state": expected}
    flag = claim and traced and expected
    why = []
    if not claim:
        why.append("no completion was claimed" + (" (action cap reached)" if result.capped else ""))
    if claim and not traced:
        why.append(f"claim not supported: goal words {terms} not found in the observations of effective actions")
    if claim and traced and not expected:
        why.append("the expected state was not reached" + (" (the task is not won)" if last else
                                                           " (look/inventory do not show it)"))
    report = ("accepted" if flag else "rejected") + (": " + "; ".join(why) if why else "") + \
        f" | checks {checks}"
    return Verdict(flag, checks, report)


def distill_sop(env: str, task_type: str, result: SubTaskResult, prov: en.Provenance) -> en.SOP | None:
    """An SOP from a successful sub-task: its effective env actions as templates, its failed action
    types as notes. None when no effective action was taken."""
    steps: list[str] = []
    notes: list[str] = []
    for s in result.steps:
        if s.kind != "env":
            continue
        t = template(s.action)
        if is_failure(s.observation):
            note = f"'{t}' had no effect at that point"
            if note not in notes:
                notes.append(note)
        elif not steps or steps[-1] != t:
            steps.append(t)
    if not steps:
        return None
    pre = [f"task type: {task_type}"] if task_type else []
    return en.SOP(env=env, skill=skill_name(result.subtask.description), preconditions=pre, steps=steps,
                  notes=notes[:3], provenance=prov, counts=en.Counts(uses=1, successes=1))


def skill_name(description: str) -> str:
    """Normalised skill key: lower case, numbers and articles removed."""
    words = [w for w in _WORD.findall(description.lower()) if w not in ("a", "an", "the")]
    return " ".join(words[:8]) or description.strip().lower()


def dilemmas(results: Sequence[SubTaskResult], won: bool) -> list[str]:
    """Problems visible in a task's trajectory (each becomes a strategic-memory candidate)."""
    out: list[str] = []
    env_steps = [s for r in results for s in r.steps if s.kind == "env"]
    fails = [s for s in env_steps if is_failure(s.observation)]
    if env_steps and len(fails) >= max(3, len(env_steps) // 3):
        kinds = sorted({s.action.split(" ")[0] for s in fails})
        out.append(f"many commands have no effect (e.g. {', '.join(kinds[:3])})")
    acts = [s.action for s in env_steps]
    for a in set(acts):
        if acts.count(a) >= 3:
            out.append(f"the same command is repeated ('{template(a)}')")
            break
    if any(r.capped for r in results):
        out.append("a sub-task uses all its actions without reaching its goal")
    if any(r.claimed and not r.flag for r in results):
        out.append("a sub-task is declared finished before its goal can be observed")
    if not won and not out:
        out.append("the task ends without success")
    return out


def clean_rule(text: str) -> str:
    """First sentence of a generated rule, trimmed; "" if nothing usable."""
    t = text.strip().split("\n")[0].strip(" -*\"'")
    t = re.split(r"(?<=[.!?])\s", t)[0]
    return t if 8 <= len(t) <= 240 else ""


def distill_tools(env: str, results: Sequence[SubTaskResult]) -> dict[str, str]:
    """Dynamic tool instructions from use: per action type, a command that worked, and one that did
    not (templates), when the trajectory has them."""
    worked: dict[str, str] = {}
    failed: dict[str, str] = {}
    for r in results:
        for s in r.steps:
            if s.kind != "env":
                continue
            a = action_type(env, s.action)
            if not a or a in (ACCESS_GUIDE, FINISH):
                continue
            (failed if is_failure(s.observation) else worked).setdefault(a, template(s.action))
    out: dict[str, str] = {}
    for a in set(worked) | set(failed):
        parts = []
        if a in worked:
            parts.append(f"worked before: '{worked[a]}'")
        if a in failed:
            parts.append(f"had no effect before: '{failed[a]}'")
        out[a] = "; ".join(parts)
    return out
