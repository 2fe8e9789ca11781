"""Generative agent with metacognition (paper 001, ReplicantLife).

Each step the simulation hands the agent a :class:`StepContext` (what it notices,
the memories retrieved for its situation, its action options) and runs
:meth:`GenerativeAgent.think` in a worker thread. ``think`` works on a copy of the
agent's mind and returns a :class:`Decision`; the simulation applies it only if it
arrived within the step's time budget, else the agent continues its current plan.

Inside ``think``, in order, each behind its feature flag:
- progress self-rating every ``progress_every`` steps (metacognition): a 1-10
  score and a reason, stored as a ``meta`` memory; below ``progress_threshold``
  it runs :meth:`meta_cognize`;
- reflection when the importance of memories since the last one reaches
  ``reflect_threshold`` (reflection);
- a plan (a sentence and a target place) when it has none (planning);
- the choice of one action from the options, which include ``meta_cognize``;
- for ``talk``: one line and the other agent's reply (a conversation).

``meta_cognize`` acts through control by default (``AgentConfig.meta_mode="control"``): the agent
answers the scenario's next seed question from the memories retrieved for it (a ``meta`` memory),
then chooses one of the control options the simulation offers (``StepContext.controls``): keep its
plan, go to a place, or seek out a person it knows the whereabouts of, to ask for help, to invite
them or to approach them. Seeking is an intention the simulation carries out without further model
calls (walk to where the person was last seen, act when they are in sight, give up when they are
not there); while it lasts the agent makes no action choice, and when it ends the next decision
chooses the next control (``Mind.rethink``). The prose mode (``"prose"``, paper
001's wording): a new introspective question (different from the last ones; when the model repeats
itself, the next unused seed question is taken) and one seed question answered from memory, then
keep or change the goal, a strategy sentence and the place that fits it.
"""
from __future__ import annotations

import copy
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from metacog_fast.town.generative import prompts as P
from metacog_fast.town.generative.memory import MemoryStream, PendingMemory


@dataclass(frozen=True)
class Features:
    """Feature flags of the cognitive modules (the ablation switches)."""

    memory: bool = True
    """Long-term memory stream and retrieval (off: only the short-term memory reaches prompts)."""
    reflection: bool = True
    """Reflections when accumulated importance passes the threshold."""
    planning: bool = True
    """A plan (sentence + target place) that ``continue`` follows."""
    metacognition: bool = True
    """Progress self-rating and ``meta_cognize`` (as an action and below the threshold)."""

    def label(self) -> str:
        on = [n for n in ("memory", "reflection", "planning", "metacognition") if getattr(self, n)]
        return "+".join(on) if on else "none"


CHOICES = ("text", "letter")
META_MODES = ("control", "prose")
SEEK_PURPOSES = ("talk", "invite", "approach")
"""Why an agent seeks someone out: to ask for help (a conversation that shares what both know),
to invite them to the party, or to approach them (the murderer's follow / attack options follow)."""


class AgentLLM(Protocol):
    """What an agent needs of its model (``metacog_fast.town.llm_adapter.SimLLM`` provides it)."""

    def choose(self, prompt: str, options: list[str], purpose: str,
               cancel: threading.Event | None = None) -> int: ...

    def choice(self, prompt: str, options: list[str], purpose: str,
               cancel: threading.Event | None = None) -> Any: ...

    def rate(self, prompt: str, purpose: str, cancel: threading.Event | None = None) -> int: ...

    def text(self, prompt: str, purpose: str, max_tokens: int = 32, stop: list[str] | None = None,
             cancel: threading.Event | None = None, temperature: float = 0.0, seed: int | None = None) -> str: ...


def by_content(logprobs: list[float], options: list[str]) -> int:
    """Index of the option with the highest log-likelihood per character of its words.

    ``logprobs`` [N]: total log-likelihood of each continuation ``options`` [N]; the total favours
    short options, the per-character mean does not (the length normalisation of multiple-choice
    scoring)."""
    if len(logprobs) != len(options) or not options:
        raise ValueError(f"logprobs: expected one value per option ({len(options)}), got {len(logprobs)}")
    per_char = [lp / max(1, len(o)) for lp, o in zip(logprobs, options)]
    return max(range(len(options)), key=per_char.__getitem__)


@dataclass(frozen=True)
class AgentConfig:
    """Settings of the generative agent."""

    retrieve_k: int = 5
    """Memories retrieved per query."""
    progress_every: int = 4
    """Steps between progress self-ratings."""
    progress_threshold: int = 5
    """A self-rating below this triggers ``meta_cognize`` (paper: "not making enough progress")."""
    reflect_threshold: float = 40.0
    """Sum of importance of new memories that triggers a reflection."""
    max_options: int = 9
    """Most action options shown in one prompt."""
    talk_tokens: int = 24
    """Max tokens of one conversation line."""
    answer_tokens: int = 32
    """Max tokens of an introspective answer, reflection or interview answer."""
    choice: str = "text"
    """How the agent picks its action and its plan or strategy place: ``"text"`` scores each
    option's own words as the continuation of the prompt, per character (a choice by content);
    ``"letter"`` scores the letters of a lettered list (the original prompt). A 135M model's letter
    choice is blind to content: it takes the same slot whatever the slot holds (docs/sim.md)."""

    meta_mode: str = "control"
    """What ``meta_cognize`` changes: ``"control"`` picks one of the simulation's control options
    (keep the plan, go to a place, seek out a person; module docstring); ``"prose"`` rewrites the
    goal and strategy sentences and picks a place for them (paper 001's wording)."""
    progress_reason: bool | None = None
    """Whether a progress rating also generates a one-line reason (a second model call of ~24
    tokens) kept with the score in the rating's memory. None: only in ``"prose"`` mode, where
    ``meta_cognize`` rewrites goal and strategy from what the memories say; in control mode the
    reason was read by nothing but memory retrieval (docs/sim.md, "Measured: the zombie")."""

    @property
    def rates_with_reason(self) -> bool:
        return self.meta_mode == "prose" if self.progress_reason is None else bool(self.progress_reason)

    def __post_init__(self) -> None:
        if self.choice not in CHOICES:
            raise ValueError(f"choice: expected one of {', '.join(CHOICES)}, got {self.choice!r}")
        if self.meta_mode not in META_MODES:
            raise ValueError(f"meta_mode: expected one of {', '.join(META_MODES)}, got {self.meta_mode!r}")


@dataclass(frozen=True)
class Action:
    """One option of the action list."""

    kind: str
    """continue, stay, move, talk, use, flee, meta_cognize, attack, follow, accuse, invite; the
    simulation's own: ask (a sought person asked for help); control options: keep, move, seek."""
    label: str
    """Text shown to the LLM, e.g. ``"move to the Bunker"``."""
    target: str | None = None
    """Place, agent or object the action refers to."""
    purpose: str | None = None
    """For ``seek``: why (one of ``SEEK_PURPOSES``)."""


@dataclass
class Mind:
    """The parts of an agent that thinking changes (copied per step job)."""

    goal: str = ""
    """Current goal ("" = none)."""
    strategy: str = ""
    """Current strategy sentence."""
    plan: str = ""
    """Current plan sentence."""
    target: str | None = None
    """Place the plan or strategy leads to."""
    asked: list[str] = field(default_factory=list)
    """Introspective questions asked so far (newest last)."""
    importance_acc: float = 0.0
    """Importance accumulated since the last reflection."""
    progress: list[tuple[int, int, str]] = field(default_factory=list)
    """(step, score 1-10, reason) of every self-rating."""
    seed_next: int = 0
    """Next scenario seed question to use."""
    rated_on: str = ""
    """What the last progress rating saw (goal, target, recent memories): a rating that would see
    the same is skipped, since it cannot come out differently or change anything."""
    seek: str | None = None
    """The person this agent is seeking out (an intention from ``meta_cognize``), or None."""
    seek_for: str = ""
    """Why (``SEEK_PURPOSES``)."""
    seek_since: int = -1
    """The step the intention was formed (with ``seek``, its identity)."""
    rethink: bool = False
    """An intention ended (found or lost): the next decision runs ``meta_cognize`` to choose the next
    control, without waiting for the rating cadence."""


@dataclass
class StepContext:
    """What the simulation gives an agent for one step."""

    step: int
    now: float
    """Simulation seconds."""
    clock: str
    place: str
    premise: str
    notices: list[str]
    """Perception and short-term memory lines."""
    memories: list[str]
    """Long-term memories retrieved for the situation (empty without the memory module)."""
    options: list[Action]
    places: list[str]
    """Every location name (for strategy and plan targets)."""
    meta_questions: list[str]
    """Scenario seed questions."""
    listener_heads: dict[str, str] = field(default_factory=dict)
    """Prompt header of each agent this one may talk to (for the reply)."""
    controls: list[Action] = field(default_factory=list)
    """What ``meta_cognize`` may change in control mode: the first keeps the plan, then ``move``
    (a place) and ``seek`` (a person, with its purpose) options."""


@dataclass
class Decision:
    """The outcome of one ``think``: applied by the simulation if it arrives in time."""

    action: Action
    mind: Mind
    memories: list[PendingMemory] = field(default_factory=list)
    """New memories of this agent (meta, reflection, plan, own conversation lines)."""
    events: list[tuple[str, str]] = field(default_factory=list)
    """(kind, text) for the timeline: goal, strategy, meta, progress, reflection, plan."""
    utterances: list[tuple[str, str, str]] = field(default_factory=list)
    """(speaker, listener, line) of a conversation."""
    metacognized: bool = False
    """Whether meta_cognize ran this step."""


class GenerativeAgent:
    """One agent: identity, position, mind and feature flags."""

    def __init__(self, name: str, description: str, personality: str, goal: str, role: str,
                 pos: tuple[int, int], features: Features, config: AgentConfig) -> None:
        self.name = name
        self.description = description
        self.personality = personality
        self.role = role
        self.pos = pos
        self.alive = True
        self.features = features
        self.config = config
        self.mind = Mind(goal=goal)
        self.timeline: list[dict[str, Any]] = []
        self.action: Action = Action("stay", "stay where I am")
        self.knows: set[str] = set()
        """Scenario facts the agent knows (e.g. ``"party"``)."""
        self.last_seen: dict[str, tuple[str, int, tuple[int, int]]] = {}
        """name -> (place, step, cell) where this agent last saw each other agent (or knew them to be)."""
        self._bare_lp: dict[tuple[str, ...], list[float]] = {}
        """Log-likelihood of each control option in its list without the situation (``_pick_pmi``)."""
        self.ended: set[tuple[str, int]] = set()
        """(seek, seek_since) of intentions the simulation ended; a decision formed before the end
        (the game loop's decisions arrive later) does not revive them."""

    # ------------------------------------------------------------------ helpers
    def head(self, premise: str, mind: Mind | None = None) -> str:
        m = mind or self.mind
        return P.header(self.name, self.description, self.personality, premise, m.goal, m.strategy)

    def apply(self, d: Decision, step: int) -> None:
        """Adopt a decision that arrived in time."""
        self.mind = d.mind
        if self.mind.seek is not None and (self.mind.seek, self.mind.seek_since) in self.ended:
            self.mind.seek = None
        self.action = d.action
        for kind, text in d.events:
            self.timeline.append({"step": step, "kind": kind, "text": text})

    # ------------------------------------------------------------------ thinking
    def think(self, ctx: StepContext, llm: AgentLLM, memory: MemoryStream | None,
              cancel: threading.Event | None = None) -> Decision:
        """Decide this step's action (runs in a worker thread; touches only a copy of the mind)."""
        mind = copy.deepcopy(self.mind)
        d = Decision(action=Action("continue", "continue"), mind=mind)
        f, c = self.features, self.config
        mem = memory if f.memory else None
        if f.metacognition and mind.rethink:
            mind.rethink = False
            if c.meta_mode == "control" and len(ctx.controls) >= 2:
                d.events.append(("rethink", "an intention ended"))
                self.meta_cognize(ctx, llm, mem, mind, d, cancel)
        if f.metacognition and ctx.step > 0 and ctx.step % c.progress_every == 0 and not d.metacognized:
            seen = self._rating_inputs(ctx, mind)
            if c.meta_mode == "control" and len(ctx.controls) < 2:
                d.events.append(("progress_skipped", "no control option to change"))
            elif seen == mind.rated_on:
                d.events.append(("progress_skipped", "nothing new since the last rating"))
            else:
                mind.rated_on = seen
                score = self.rate_progress(ctx, llm, mind, d, cancel)
                if score < c.progress_threshold:
                    self.meta_cognize(ctx, llm, mem, mind, d, cancel)
        if f.reflection and mem is not None and mind.importance_acc >= c.reflect_threshold:
            self.reflect(ctx, llm, mind, d, cancel)
        if f.planning and not mind.plan and mind.seek is None:
            self.make_plan(ctx, llm, mind, d, cancel)
        if mind.seek is not None:  # an intention: the simulation walks and acts, no choice to make
            d.action = Action("seek", f"look for {mind.seek}", mind.seek, mind.seek_for)
            return d
        opts = ctx.options[: c.max_options]
        if not f.metacognition:
            opts = [o for o in opts if o.kind != "meta_cognize"]
        head = self.head(ctx.premise, mind)
        notes = ctx.notices + ([f"my plan: {mind.plan}"] if mind.plan else [])
        d.action = opts[self._pick(llm, "action", cancel, [o.label for o in opts],
                                   lambda labels: P.action_text(head, self.name, ctx.clock, ctx.place, notes,
                                                                ctx.memories, labels),
                                   lambda labels: P.action(head, self.name, ctx.clock, ctx.place, notes,
                                                           ctx.memories, labels))]
        if d.action.kind == "meta_cognize":
            if not d.metacognized:
                self.meta_cognize(ctx, llm, mem, mind, d, cancel)
            if mind.seek is not None:
                d.action = Action("seek", f"look for {mind.seek}", mind.seek, mind.seek_for)
        elif d.action.kind == "talk" and d.action.target in ctx.listener_heads:
            self.converse(ctx, llm, d.action.target, head, d, cancel)
        return d

    @staticmethod
    def _rating_inputs(ctx: StepContext, mind: Mind) -> str:
        """The inputs of a progress rating, without the clock (which always changes)."""
        return "\n".join([mind.goal, mind.target or "", *sorted((ctx.notices + ctx.memories)[:6])])

    def rate_progress(self, ctx: StepContext, llm: AgentLLM, mind: Mind, d: Decision,
                      cancel: threading.Event | None) -> int:
        """Rate progress toward the goal 1-10 (with a generated reason if ``AgentConfig.rates_with_reason``);
        stored as a meta memory."""
        head = self.head(ctx.premise, mind)
        recent = (ctx.notices + ctx.memories)[:6]
        prompt = P.progress(head, self.name, recent)
        score = llm.rate(prompt, "progress", cancel)
        reason = ""
        if self.config.rates_with_reason:
            reason = llm.text(P.progress_reason(prompt, score), "progress", max_tokens=24, cancel=cancel)
        mind.progress.append((ctx.step, score, reason))
        text = f"{self.name} rated own progress toward the goal '{mind.goal or 'none yet'}' {score}/10"
        d.memories.append(PendingMemory(self.name, f"{text}: {reason}" if reason else text, "meta", ctx.place))
        d.events.append(("progress", f"{score}/10 {reason}".strip()))
        return score

    def meta_cognize(self, ctx: StepContext, llm: AgentLLM, mem: MemoryStream | None, mind: Mind, d: Decision,
                     cancel: threading.Event | None) -> None:
        """Introspection, then a change of what the agent does (``AgentConfig.meta_mode``)."""
        if self.config.meta_mode == "control" and ctx.controls:
            self._meta_control(ctx, llm, mem, mind, d, cancel)
        else:
            self._meta_prose(ctx, llm, mem, mind, d, cancel)

    def _meta_control(self, ctx: StepContext, llm: AgentLLM, mem: MemoryStream | None, mind: Mind, d: Decision,
                      cancel: threading.Event | None) -> None:
        """One seed question answered from memory, then one of ``ctx.controls`` (by :meth:`_pick_pmi`)."""
        d.metacognized = True
        before = (mind.target, mind.seek, mind.seek_for)
        head = self.head(ctx.premise, mind)
        seeds = ctx.meta_questions
        q = seeds[mind.seed_next % len(seeds)]
        mind.seed_next += 1
        recalled = mem.retrieve_text(self.name, [q], self.config.retrieve_k, ctx.now)[0] if mem else ctx.notices[:5]
        a = llm.text(P.answer(head, self.name, q, recalled), "meta", max_tokens=self.config.answer_tokens, cancel=cancel)
        mind.asked.append(q)
        d.memories.append(PendingMemory(self.name, f"{self.name} asked themself: {q} Answer: {a or '(no answer)'}",
                                        "meta", ctx.place))
        d.events.append(("meta", f"{q} -> {a}"))
        opts = ctx.controls
        labels = [o.label for o in opts]
        thought = f"{q} {a}".strip()
        if self.config.choice == "letter":
            j = llm.choose(P.control(head, self.name, ctx.place, thought, labels), P.letter_options(len(labels)),
                           "meta", cancel)
        else:
            j = self._pick_pmi(llm, cancel, P.control_text(head, self.name, ctx.place, thought, labels), labels)
        chosen = opts[j]
        if chosen.kind == "move":
            mind.target, mind.seek, mind.seek_for = chosen.target, None, ""
        elif chosen.kind == "seek":
            mind.seek, mind.seek_for, mind.seek_since = chosen.target, chosen.purpose or "talk", ctx.step
        d.events.append(("control", f"{chosen.kind}: {chosen.label}"))
        changed = [n for n, b, x in zip(("target", "seek", "purpose"), before, (mind.target, mind.seek, mind.seek_for))
                   if b != x]
        d.events.append(("meta_changed", ", ".join(changed) if changed else "nothing"))
        d.memories.append(PendingMemory(self.name, f"{self.name} decided to {chosen.label}", "meta", ctx.place))

    def _pick_pmi(self, llm: AgentLLM, cancel: threading.Event | None, prompt: str, labels: list[str]) -> int:
        """Index of the option whose words the agent's situation makes most likely *relative to*
        their likelihood in the same list without the situation (``P.control_bare``: no persona,
        place or thought): domain-conditional PMI (Holtzman et al., "Surface Form Competition: Why
        the Highest Probability Answer Isn't Always Right"). Scored by likelihood per character
        alone, SmolLM2-135M took "go to the <place>" over every other control in 59 of 59 choices of
        two party runs (docs/sim.md); against a bare "{name} decides to" without the list, a rare
        listed place name won by being copied. The bare scores are cached per option list."""
        words = [f" {o}" for o in labels]
        lp = list(llm.choice(prompt, words, "meta", cancel).logprobs)
        key = tuple(labels)
        if key not in self._bare_lp:
            self._bare_lp[key] = [float(x) for x in llm.choice(P.control_bare(self.name, labels), words, "meta",
                                                               cancel).logprobs]
        bare = self._bare_lp[key]
        return max(range(len(words)), key=lambda i: lp[i] - bare[i])

    def _meta_prose(self, ctx: StepContext, llm: AgentLLM, mem: MemoryStream | None, mind: Mind, d: Decision,
                    cancel: threading.Event | None) -> None:
        """Introspective questions answered from memory; goal and strategy revision (paper 001)."""
        d.metacognized = True
        before = (mind.goal, mind.target, mind.strategy)
        head = self.head(ctx.premise, mind)
        thoughts = (ctx.memories + ctx.notices)[:5]
        q_new = llm.text(P.question(head, self.name, thoughts, mind.asked), "meta", max_tokens=24,
                         stop=["\n", "?"], cancel=cancel)
        questions = []
        if q_new and not _seen(q_new, mind.asked):
            questions.append(q_new.rstrip("?") + "?")
        seeds = ctx.meta_questions
        for _ in range(len(seeds)):
            s = seeds[mind.seed_next % len(seeds)]
            mind.seed_next += 1
            if not _seen(s, questions) and (len(questions) == 0 or not _seen(s, mind.asked[-2:])):
                questions.append(s)
                break
        answers = []
        for q in questions[:2]:
            recalled = mem.retrieve_text(self.name, [q], self.config.retrieve_k, ctx.now)[0] if mem else ctx.notices[:5]
            a = llm.text(P.answer(head, self.name, q, recalled), "meta", max_tokens=self.config.answer_tokens,
                         cancel=cancel)
            mind.asked.append(q)
            text = f"{self.name} asked themself: {q} Answer: {a or '(no answer)'}"
            answers.append(f"{q} {a}")
            d.memories.append(PendingMemory(self.name, text, "meta", ctx.place))
            d.events.append(("meta", f"{q} -> {a}"))
        change = not mind.goal or llm.choose(P.keep_goal(head, self.name, answers), [" A", " B"], "meta", cancel) == 1
        if change:
            g = llm.text(P.new_goal(head, self.name, answers), "meta", max_tokens=16, cancel=cancel)
            if g:
                mind.goal = g.rstrip(".")
                d.events.append(("goal", mind.goal))
                d.memories.append(PendingMemory(self.name, f"{self.name} set a new goal: {mind.goal}", "meta", ctx.place))
        head = self.head(ctx.premise, mind)
        s = llm.text(P.new_strategy(head, self.name, mind.goal or "get through the day", answers), "meta",
                     max_tokens=20, cancel=cancel)
        if s:
            mind.strategy = s.rstrip(".")
        places = self._shuffled(ctx, "strategy")
        purpose = f"Strategy: {mind.strategy or 'none'}."
        j = self._pick(llm, "meta", cancel, places, lambda ps: P.place_for_text(head, self.name, purpose, ps),
                       lambda ps: P.place_for(head, self.name, purpose, ps))
        mind.target = places[j]
        mind.plan = f"{mind.strategy or 'go'} (at the {mind.target})"
        d.events.append(("strategy", f"{mind.strategy or '(none)'} -> {mind.target}"))
        changed = [n for n, b, a in zip(("goal", "target", "strategy"), before,
                                        (mind.goal, mind.target, mind.strategy)) if b != a]
        d.events.append(("meta_changed", ", ".join(changed) if changed else "nothing"))
        d.memories.append(PendingMemory(
            self.name, f"{self.name}'s new strategy: {mind.strategy or 'go to the ' + mind.target}; "
                       f"best place: {mind.target}", "meta", ctx.place))

    def reflect(self, ctx: StepContext, llm: AgentLLM, mind: Mind, d: Decision, cancel: threading.Event | None) -> None:
        insight = llm.text(P.reflection(self.head(ctx.premise, mind), self.name, ctx.memories[:6]), "reflection",
                           max_tokens=self.config.answer_tokens, cancel=cancel)
        mind.importance_acc = 0.0
        if insight:
            d.memories.append(PendingMemory(self.name, f"{self.name} realised: {insight}", "reflection", ctx.place))
            d.events.append(("reflection", insight))

    def make_plan(self, ctx: StepContext, llm: AgentLLM, mind: Mind, d: Decision, cancel: threading.Event | None) -> None:
        head = self.head(ctx.premise, mind)
        text = llm.text(P.plan(head, self.name, ctx.memories[:4]), "plan", max_tokens=20, cancel=cancel)
        places = self._shuffled(ctx, "plan")
        purpose = f"Plan: {text or 'none'}."
        j = self._pick(llm, "plan", cancel, places, lambda ps: P.place_for_text(head, self.name, purpose, ps),
                       lambda ps: P.place_for(head, self.name, purpose, ps))
        mind.plan = text or f"go to the {places[j]}"
        mind.target = places[j]
        d.events.append(("plan", f"{mind.plan} -> {mind.target}"))
        d.memories.append(PendingMemory(self.name, f"{self.name} plans to {mind.plan}", "plan", ctx.place))

    def _pick(self, llm: AgentLLM, purpose: str, cancel: threading.Event | None, options: list[str],
              text_prompt: Any, letter_prompt: Any) -> int:
        """Index of the chosen option, by its words or by its letter (``AgentConfig.choice``)."""
        if self.config.choice == "letter":
            return llm.choose(letter_prompt(options), P.letter_options(len(options)), purpose, cancel)
        words = [f" {o}" for o in options]
        return by_content(list(llm.choice(text_prompt(options), words, purpose, cancel).logprobs), words)

    def _shuffled(self, ctx: StepContext, what: str) -> list[str]:
        """Places in a per-(agent, step, purpose) seeded order: a small model's bias toward the
        first letter must not send every agent to the same place."""
        rng = random.Random(f"{self.name}/{ctx.step}/{what}")
        places = list(ctx.places)
        rng.shuffle(places)
        return places

    def converse(self, ctx: StepContext, llm: AgentLLM, other: str, head: str, d: Decision,
                 cancel: threading.Event | None) -> None:
        line = llm.text(P.say(head, self.name, other, ctx.place, ctx.memories[:3]), "talk",
                        max_tokens=self.config.talk_tokens, stop=['"', "\n"], cancel=cancel)
        if not line:
            return
        d.utterances.append((self.name, other, line))
        back = llm.text(P.reply(ctx.listener_heads[other], other, self.name, line), "talk",
                        max_tokens=self.config.talk_tokens, stop=['"', "\n"], cancel=cancel)
        if back:
            d.utterances.append((other, self.name, back))


def _norm(s: str) -> str:
    return "".join(ch for ch in s.lower() if ch.isalnum() or ch == " ").strip()


def _seen(q: str, previous: list[str]) -> bool:
    n = _norm(q)
    return any(_norm(p) == n for p in previous)
