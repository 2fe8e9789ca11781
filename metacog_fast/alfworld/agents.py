"""The agents: ReAct, Reflexion, MUSE (+ lowest / random controls) and FCRF.

Every agent plays an episode through the same four calls made by
:func:`metacog_fast.alfworld.episode.run_episode`:
``begin(ctx)`` -> ``act(admissible)`` / ``observe(action, obs)`` per step -> ``end(won, pairs)``.
``restore(records)`` rebuilds cross-episode state (reflections, lesson pool) from persisted
episode records when a run resumes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from metacog_fast.alfworld import prompts
from metacog_fast.alfworld.actions import ActionMapper, Mapped, clean_action, is_think, parse_rollout
from metacog_fast.alfworld.config import AgentConfig
from metacog_fast.alfworld.fcrf import LessonPool, deep_reflection, difficulty
from metacog_fast.alfworld.memory import ReflectionMemory

if TYPE_CHECKING:
    from metacog_fast.scoring.scorer import TrajectoryScorer
    from metacog_fast.llm.protocol import LLM


@dataclass
class EpisodeContext:
    """What an agent knows when an episode starts."""

    game: str
    """Game key (task folder/trial), the unit that reflections belong to."""
    task: str
    """"Your task is to: ..." line."""
    task_type: str
    """Task type (folder prefix)."""
    intro: str
    """First observation without the banner."""
    episode: int
    """Index of this episode among the game's episodes (adaptation first, then test)."""


@dataclass
class Decision:
    """One environment step's choice."""

    action: str
    """Command sent to the environment."""
    proposed: str
    """The LLM's text before mapping."""
    how: str
    """Mapping used ("exact", "embed", "choose", "raw")."""
    thinks: list[str] = field(default_factory=list)
    """Think lines produced before this action."""
    map_seconds: float = 0.0
    """Wall time of the admissible mapping (non-LLM part counts as agent time)."""
    info: dict[str, Any] = field(default_factory=dict)
    """Agent-specific (MUSE: rollouts and scores)."""


def generate_plan(llm: LLM, examples: Sequence[dict[str, Any]], ctx: "EpisodeContext", notes: Sequence[str],
                  max_tokens: int) -> str:
    """The initial plan P of an episode (greedy), from the examples' plans and the task."""
    out = llm.complete(prompts.plan_prompt(examples, ctx.intro, notes), max_tokens=max_tokens,
                       stop=["\n"], temperature=0.0)
    text = " ".join(out[0].text.split())
    return "1. " + text if text else "1. find the object."


class ReActAgent:
    """ReAct: think/act lines continuing a few-shot transcript, greedy decoding."""

    name = "react"

    def __init__(self, llm: LLM, examples: dict[str, list[dict[str, Any]]], config: AgentConfig,
                 mapper: ActionMapper) -> None:
        self.llm, self.examples, self.cfg, self.mapper = llm, examples, config.validate(), mapper
        self.ctx: EpisodeContext | None = None
        self.prefix = ""
        self.lines: list[tuple[str, str]] = []

    # -- prompt ---------------------------------------------------------------------------
    def notes(self, ctx: EpisodeContext) -> list[str]:
        return []

    def plan(self) -> str | None:
        return None

    def begin(self, ctx: EpisodeContext) -> dict[str, Any]:
        if ctx.task_type not in self.examples:
            raise ValueError(f"task_type: no few-shot examples for {ctx.task_type!r}")
        self.ctx = ctx
        self.lines = []
        self.prefix = prompts.actor_prefix(self.examples[ctx.task_type][: self.cfg.examples], ctx.intro,
                                           self.notes(ctx), self.plan())
        return {"prefix": self.prefix}

    def prompt(self) -> str:
        return self.prefix + prompts.history_text(self.lines) + ">"

    def observe(self, action: str, obs: str) -> None:
        self.lines.append((action, " ".join(obs.split())))

    # -- acting ---------------------------------------------------------------------------
    def _generate(self) -> str:
        out = self.llm.complete(self.prompt(), max_tokens=self.cfg.action_max_tokens, stop=["\n"], temperature=0.0)
        return out[0].text

    def act(self, admissible: Sequence[str] | None) -> Decision:
        thinks: list[str] = []
        text = self._generate()
        while is_think(text) and len(thinks) < self.cfg.max_thinks:
            thinks.append(clean_action(text))
            self.lines.append((thinks[-1], "OK."))
            text = self._generate()
        m = self.mapper.map(text, admissible, self.prompt())
        return Decision(m.action, m.proposed, m.how, thinks, m.seconds)

    # -- between episodes -----------------------------------------------------------------
    def end(self, won: bool, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        return {}

    def restore(self, game: str, records: Sequence[dict[str, Any]]) -> None:
        """Rebuild cross-episode state from ``game``'s earlier records (ReAct has none)."""


class ReflexionAgent(ReActAgent):
    """Reflexion: a reflection after every episode (success or failure; only failures with
    ``reflect_on="failure"``), stored in the memory store; the last ``reflections_kept`` of the task
    go into the next prompt."""

    name = "reflexion"

    def __init__(self, llm: LLM, examples: dict[str, list[dict[str, Any]]], config: AgentConfig,
                 mapper: ActionMapper, memory: ReflectionMemory, record_plan: bool = False,
                 reflector: LLM | None = None) -> None:
        super().__init__(llm, examples, config, mapper)
        self.memory = memory
        self.reflector = reflector if reflector is not None else llm
        """The reflection LLM (paper 000 trains it apart from the actor: Reflexion + SL's DPO
        reflector); the actor by default."""
        self.record_plan = record_plan
        """Pre-deployment data collection: also write a plan P (not shown to the actor) so the
        episode's chunks can train M_sa(I, P, tau)."""

    def begin(self, ctx: EpisodeContext) -> dict[str, Any]:
        info = super().begin(ctx)
        if self.record_plan:
            info["plan"] = generate_plan(self.llm, self.examples[ctx.task_type][: self.cfg.examples], ctx,
                                         self.notes(ctx), self.cfg.plan_max_tokens)
        return info

    def notes(self, ctx: EpisodeContext) -> list[str]:
        return self.memory.last(ctx.game, self.cfg.reflections_kept)

    def reflect(self, won: bool, pairs: Sequence[tuple[str, str]]) -> str:
        assert self.ctx is not None
        out = self.reflector.chat(prompts.reflection_messages(self.ctx.task, pairs, won),
                            max_tokens=self.cfg.reflection_max_tokens, temperature=0.0)
        text = " ".join(out[0].text.split())
        return text or ("The attempt succeeded." if won else "The attempt failed.")

    def end(self, won: bool, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        assert self.ctx is not None
        if won and self.cfg.reflect_on == "failure":
            return {}
        text = self.reflect(won, pairs)
        self.memory.add(self.ctx.game, self.ctx.episode, text)
        return {"reflection": text}

    def restore(self, game: str, records: Sequence[dict[str, Any]]) -> None:
        self.memory.clear(game)
        for r in records:
            text = r.get("end", {}).get("reflection")
            if text:
                self.memory.add(game, r["episode"], text)


class MuseAgent(ReflexionAgent):
    """MUSE (LLM): initial plan; per step ``rollouts`` sampled futures of (action, observation)
    pairs from the actor LLM; M_sa scores each; the first action of the selected one is executed.

    ``select``: "highest" (MUSE), "lowest" (control), "random" (control: uniform choice).
    The scored chunk is the last executed pairs followed by the rollout's pairs, cut to the
    scorer's chunk size (4), so it has the same form as the training chunks.
    """

    name = "muse"

    def __init__(self, llm: LLM, examples: dict[str, list[dict[str, Any]]], config: AgentConfig,
                 mapper: ActionMapper, memory: ReflectionMemory, scorer: TrajectoryScorer, select: str = "highest",
                 reflector: LLM | None = None) -> None:
        super().__init__(llm, examples, config, mapper, memory, reflector=reflector)
        if select not in ("highest", "lowest", "random"):
            raise ValueError(f"select: expected 'highest', 'lowest' or 'random', got {select!r}")
        if config.decode_only_pick and select != "random":
            raise ValueError(f"decode_only_pick: only select='random' (MUSE-random) can pick a rollout before "
                             f"decoding; select={select!r} needs every rollout")
        self.scorer, self.select_mode = scorer, select
        self.name = {"highest": "muse", "lowest": "muse-lowest", "random": "muse-random"}[select]
        self.rng = np.random.default_rng(config.seed)
        self.current_plan = ""
        self.step_seed = config.seed
        self.executed: list[tuple[str, str]] = []

    def plan(self) -> str | None:
        return self.current_plan

    def begin(self, ctx: EpisodeContext) -> dict[str, Any]:
        self.ctx = ctx
        self.executed = []
        if ctx.task_type not in self.examples:
            raise ValueError(f"task_type: no few-shot examples for {ctx.task_type!r}")
        self.current_plan = generate_plan(self.llm, self.examples[ctx.task_type][: self.cfg.examples], ctx,
                                          self.notes(ctx), self.cfg.plan_max_tokens)
        info = ReActAgent.begin(self, ctx)
        info["plan"] = self.current_plan
        return info

    def observe(self, action: str, obs: str) -> None:
        super().observe(action, obs)
        self.executed.append((action, " ".join(obs.split())))

    def act(self, admissible: Sequence[str] | None) -> Decision:
        assert self.ctx is not None
        prompt = self.prompt()
        self.step_seed += self.cfg.rollouts
        # the n rollouts decoded together (rollout i seeded step_seed + i, as the n samples of complete)
        if self.cfg.decode_only_pick:
            pick, text = self._decode_pick(prompt)
            return self._select([text], admissible, prompt, pick=pick)
        outs = self.llm.generate_many([prompt] * self.cfg.rollouts, temperature=self.cfg.rollout_temperature,
                                      max_tokens=self.cfg.rollout_max_tokens, seed=self.step_seed)
        return self.select([o.text for o in outs], admissible, prompt)

    def _decode_pick(self, prompt: str) -> tuple[int, str]:
        """MUSE-random's pick drawn first (the same draw :meth:`select` makes after decoding), then
        only that rollout decoded, with its own seed, up to the end of its first line. The line is
        the executed action unless it is empty or a think (then the action comes from a later pair,
        and the whole rollout is decoded as in the full step)."""
        pick = int(self.rng.integers(self.cfg.rollouts))
        kw = dict(temperature=self.cfg.rollout_temperature, max_tokens=self.cfg.rollout_max_tokens,
                  seed=self.step_seed + pick)
        text = self.llm.generate_many([prompt], stop=["\n"], **kw)[0].text
        first = clean_action(text.split("\n", 1)[0].strip())
        if not first or first.lower().startswith("think:"):
            text = self.llm.generate_many([prompt], **kw)[0].text
        return pick, text

    def select(self, texts: Sequence[str], admissible: Sequence[str] | None, prompt: str = "") -> Decision:
        """The agent's own part of a step (no LLM generation, no env): parse the rollouts, map their
        first actions (the proposals needing the encoder in one batched call), score the chunks with
        M_sa (one batched encoder call, duplicates once, LRU-cached texts skipped) and pick one."""
        return self._select(texts, admissible, prompt)

    def _select(self, texts: Sequence[str], admissible: Sequence[str] | None, prompt: str,
                pick: int | None = None,
                map_firsts: Callable[[list[str], Sequence[str] | None, str], list[Mapped]] | None = None,
                ) -> Decision:
        """``pick``: the rollout index MUSE-random drew before decoding only that rollout (``texts``
        is then that one rollout). ``map_firsts(proposals, admissible, prompt)``: how the rollouts'
        first actions are mapped (default: the mapper's one batched call; the benchmark's anchor,
        bench/anchors/muse_select_unbatched.py, maps them one call each)."""
        assert self.ctx is not None
        t_agent = time.perf_counter()
        size = getattr(self.scorer.config, "chunk_size", 4)
        rollouts = []
        for text in texts:
            pairs = parse_rollout(text, self.cfg.rollout_pairs)
            rollouts.append([p for p in pairs if not p[0].lower().startswith("think:")]
                            or [(clean_action(text) or "look", "")])
        firsts = (map_firsts or self.mapper.map_many)([r[0][0] for r in rollouts], admissible, prompt)
        map_s = sum(m.seconds for m in firsts)
        chunks = []
        for pairs, m in zip(rollouts, firsts):
            pairs[0] = (m.action, pairs[0][1])
            keep = max(0, size - len(pairs))
            chunks.append((self.executed[-keep:] if keep else []) + pairs[:size])
        scores = self.scorer.score(self.ctx.task, self.current_plan, chunks)
        if pick is not None:
            i = 0
        elif self.select_mode == "highest":
            i = int(np.argmax(scores))
        elif self.select_mode == "lowest":
            i = int(np.argmin(scores))
        else:
            i = int(self.rng.integers(len(scores)))
        chosen = firsts[i]
        agent_s = time.perf_counter() - t_agent
        info = {"rollouts": [[list(p) for p in r] for r in rollouts], "scores": [float(x) for x in scores],
                "chosen": i if pick is None else pick, "mapped": [m.how for m in firsts], "select_seconds": agent_s}
        if pick is not None:
            info["decoded_only_pick"] = True
        return Decision(chosen.action, chosen.proposed, chosen.how, [], map_s, info)


class FcrfAgent(ReActAgent):
    """FCRF (paper 002): the Actor acts with the Mentor's last reflections in its prompt; the
    Mentor reflects with an intensity set by the task difficulty."""

    name = "fcrf"

    def __init__(self, llm: LLM, examples: dict[str, list[dict[str, Any]]], config: AgentConfig,
                 mapper: ActionMapper, memory: ReflectionMemory, pool: LessonPool | None = None,
                 reflector: LLM | None = None) -> None:
        super().__init__(llm, examples, config, mapper)
        self.memory = memory
        self.reflector = reflector if reflector is not None else llm
        """The Mentor's LLM (experience, lessons, plans); the actor by default."""
        self.pool = pool or LessonPool()
        self.history: list[tuple[bool, list[tuple[str, str]]]] = []

    def notes(self, ctx: EpisodeContext) -> list[str]:
        return self.memory.last(ctx.game, self.cfg.reflections_kept)

    def _chat(self, messages: list[dict[str, str]]) -> str:
        out = self.reflector.chat(messages, max_tokens=self.cfg.reflection_max_tokens, temperature=0.0)
        return " ".join(out[0].text.split())

    def end(self, won: bool, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
        assert self.ctx is not None
        ctx, pairs = self.ctx, list(pairs)
        diff = difficulty(ctx.task_type)
        info: dict[str, Any] = {"difficulty": diff, "deep": deep_reflection(ctx.task_type)}
        # The pool grows from fail -> success pairs of the same task.
        if won and self.history and not self.history[-1][0]:
            tip = self._chat(prompts.new_lesson_messages(ctx.task_type, self.history[-1][1], pairs))
            if self.pool.add(ctx.task_type, tip):
                info["new_lesson"] = " ".join(tip.split())
        self.history.append((won, pairs))
        if won and self.cfg.reflect_on == "failure":
            return info
        experience = self._chat(prompts.experience_messages(ctx.task, pairs, won)) or "no useful facts."
        info["experience"] = experience
        text = f"Experience: {experience}"
        if info["deep"]:
            lesson = None
            if not won:
                pool = self.pool.lessons(ctx.task_type)
                if pool:
                    ch = self.reflector.choose(prompts.lesson_prompt(ctx.task, ctx.task_type, pairs), [" " + x for x in pool])
                    lesson = pool[ch.index]
                    info["lesson"] = lesson
            plan = self._chat(prompts.plan_messages(ctx.task, experience, lesson))
            info["plan"] = plan
            if lesson:
                text += f" Lesson: {lesson}"
            if plan:
                text += f" Plan: {plan}"
        self.memory.add(ctx.game, ctx.episode, text)
        info["reflection"] = text
        return info

    def restore(self, game: str, records: Sequence[dict[str, Any]]) -> None:
        self.memory.clear(game)
        self.history = []
        for r in records:
            end = r.get("end", {})
            if end.get("reflection"):
                self.memory.add(game, r["episode"], end["reflection"])
            if end.get("new_lesson"):
                self.pool.add(r["task_type"], end["new_lesson"])
            self.history.append((bool(r["won"]), [tuple(p) for p in r["pairs"]]))
