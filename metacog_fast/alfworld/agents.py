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
from metacog_fast.alfworld.config import AgentConfig, step_seed
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


def line_logprob(completion: Any, start: int, end: int) -> dict[str, Any] | None:
    """The actor's log-probability of ``completion.text[start:end]`` (an action line): mean and sum over
    the generated tokens that overlap that span (``token_logprobs`` / ``token_ends``), and their count.
    None where the backend returned no log-probabilities or no token overlaps the span."""
    lps, ends = getattr(completion, "token_logprobs", None), getattr(completion, "token_ends", None)
    if lps is None or ends is None or end <= start:
        return None
    sel = [lp for i, lp in enumerate(lps) if (ends[i - 1] if i else 0) < end and ends[i] > start]
    if not sel:
        return None
    return {"action_logprob": float(np.mean(sel)), "action_logprob_sum": float(np.sum(sel)),
            "action_logprob_tokens": len(sel)}


def first_action_span(text: str, action: str) -> tuple[int, int] | None:
    """Where the rollout ``text``'s first action ``action`` (as parse_rollout read it) was written:
    the first line whose command (after an optional "> ") cleans to ``action``, as (start, end)
    character offsets of the command; None when no line does (the rollout fell back to its text)."""
    pos = 0
    for i, raw in enumerate(text.split("\n")):
        line = raw.strip()
        if i == 0 or line.startswith(">"):
            cmd = line[1:].strip() if line.startswith(">") else line
            if cmd and clean_action(cmd) == action:
                start = pos + raw.find(cmd)
                return start, start + len(cmd)
        pos += len(raw) + 1
    return None


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
    @property
    def want_logprobs(self) -> bool:
        """Whether the actor's calls ask for token log-probabilities (backends that return them)."""
        return bool(getattr(self.llm, "supports_logprobs", False))

    def _generate(self) -> str:
        return self._generate_completion().text

    def _generate_completion(self) -> Any:
        kw = {"logprobs": True} if self.want_logprobs else {}
        out = self.llm.complete(self.prompt(), max_tokens=self.cfg.action_max_tokens, stop=["\n"], temperature=0.0,
                                **kw)
        return out[0]

    def act(self, admissible: Sequence[str] | None) -> Decision:
        thinks: list[str] = []
        c = self._generate_completion()
        while is_think(c.text) and len(thinks) < self.cfg.max_thinks:
            thinks.append(clean_action(c.text))
            self.lines.append((thinks[-1], "OK."))
            c = self._generate_completion()
        m = self.mapper.map(c.text, admissible, self.prompt())
        lp = line_logprob(c, 0, len(c.text))
        return Decision(m.action, m.proposed, m.how, thinks, m.seconds, lp or {})

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

    Options of :class:`AgentConfig` (docs/alfworld_agents.md, "MUSE's options"): ``greedy_candidate``
    (rollout 0 greedy; MUSE keeps it unless another beats it by ``select_margin``), ``plan_in_prompt``
    (the plan line in the actor's prompt, or for M_sa only), the competence trigger
    (``trigger_threshold`` / ``trigger_steps`` / ``trigger_action``) and ``seed_scheme``.
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
        self.step_index = 0
        """Steps acted in this episode (the step of seed_scheme "episode")."""
        self.low_steps = 0
        """Consecutive steps whose best candidate scored below ``trigger_threshold``."""
        self.boost_left = 0
        """Steps left of a "rollouts" firing."""

    def plan(self) -> str | None:
        return None if self.cfg.plan_in_prompt is False else self.current_plan

    def begin(self, ctx: EpisodeContext) -> dict[str, Any]:
        self.ctx = ctx
        self.executed = []
        self.step_index = self.low_steps = self.boost_left = 0
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

    # -- one step ------------------------------------------------------------------------
    def _next_seed(self, n: int) -> int:
        """The step's seed (rollout i gets seed + i). seed_scheme "episode": from (seed, game,
        episode, step), with MUSE-random's pick drawn from a generator seeded the same way; else the
        worker's running counter (grows by ``n`` per step)."""
        assert self.ctx is not None
        if self.cfg.seed_scheme == "episode":
            seed = step_seed(self.cfg.seed, self.ctx.game, self.ctx.episode, self.step_index)
            self.rng = np.random.default_rng(seed)
            return seed
        self.step_seed += n
        return self.step_seed

    def _temperatures(self, n: int) -> list[float]:
        t = self.cfg.rollout_temperature
        return [0.0 if (i == 0 and self.cfg.greedy_candidate) else t for i in range(n)]

    def _rollouts(self, prompt: str, n: int, seed: int) -> list[Any]:
        """``n`` rollouts of ``prompt`` decoded together (rollout i seeded ``seed + i``), in groups
        of the backend's most sequences per call where ``n`` exceeds it."""
        kw: dict[str, Any] = {"logprobs": True} if self.want_logprobs else {}
        temps = self._temperatures(n)
        group = self.llm.max_sequences or n
        if n <= group:
            return self.llm.generate_many([prompt] * n, temperature=temps if self.cfg.greedy_candidate
                                          else self.cfg.rollout_temperature,
                                          max_tokens=self.cfg.rollout_max_tokens, seed=seed, **kw)
        out: list[Any] = []
        for off in range(0, n, group):
            k = min(group, n - off)
            out += self.llm.generate_many([prompt] * k, temperature=temps[off: off + k],
                                          max_tokens=self.cfg.rollout_max_tokens,
                                          seed=[(seed + off + i) % (2**32 - 1) for i in range(k)], **kw)
        return out

    def act(self, admissible: Sequence[str] | None) -> Decision:
        assert self.ctx is not None
        prompt = self.prompt()
        boosted = self.boost_left > 0
        n = self.cfg.get("trigger_rollouts") if boosted else self.cfg.rollouts
        seed = self._next_seed(n)
        # the n rollouts decoded together (rollout i seeded seed + i, as the n samples of complete)
        if self.cfg.decode_only_pick:
            pick, comp = self._decode_pick(prompt, n, seed)
            dec = self._select([comp.text], admissible, prompt, pick=pick, completions=[comp])
        else:
            outs = self._rollouts(prompt, n, seed)
            dec = self._select([o.text for o in outs], admissible, prompt, completions=outs)
        if self.cfg.seed_scheme == "episode":
            dec.info["rollout_seed"] = seed
        if boosted:
            self.boost_left -= 1
            dec.info["boosted_rollouts"] = n
        self._competence(dec)
        self.step_index += 1
        return dec

    def _decode_pick(self, prompt: str, n: int | None = None, seed: int | None = None) -> tuple[int, Any]:
        """MUSE-random's pick drawn first (the same draw :meth:`select` makes after decoding), then
        only that rollout decoded, with its own seed (and temperature: greedy for rollout 0 with
        ``greedy_candidate``), up to the end of its first line. The line is the executed action
        unless it is empty or a think (then the action comes from a later pair, and the whole
        rollout is decoded as in the full step). Returns (pick, completion)."""
        n = self.cfg.rollouts if n is None else n
        seed = self.step_seed if seed is None else seed
        pick = int(self.rng.integers(n))
        kw: dict[str, Any] = dict(temperature=self._temperatures(n)[pick], max_tokens=self.cfg.rollout_max_tokens,
                                  seed=seed + pick)
        if self.want_logprobs:
            kw["logprobs"] = True
        comp = self.llm.generate_many([prompt], stop=["\n"], **kw)[0]
        first = clean_action(comp.text.split("\n", 1)[0].strip())
        if not first or first.lower().startswith("think:"):
            comp = self.llm.generate_many([prompt], **kw)[0]
        return pick, comp

    def _competence(self, dec: Decision) -> None:
        """The competence trigger: count consecutive steps whose best candidate scored below
        ``trigger_threshold``; at ``trigger_steps`` of them, fire (``_fire``) and start counting again.
        Records ``competence_low_steps`` on every step and ``trigger`` on a firing step."""
        thr = self.cfg.trigger_threshold
        if thr is None:
            return
        best = max(dec.info["scores"])
        self.low_steps = self.low_steps + 1 if best < thr else 0
        dec.info["competence_low_steps"] = self.low_steps
        if self.low_steps >= self.cfg.get("trigger_steps"):
            self.low_steps = 0
            dec.info["trigger"] = self._fire(best)

    def _fire(self, best: float) -> dict[str, Any]:
        """Switch strategy from the next step on; returns what changed (the step's ``trigger`` entry)."""
        assert self.ctx is not None
        info: dict[str, Any] = {"action": self.cfg.get("trigger_action"), "step": self.step_index, "best_score": best}
        if self.cfg.get("trigger_action") == "rollouts":
            self.boost_left = self.cfg.get("trigger_span")
            info.update(rollouts_from=self.cfg.rollouts, rollouts_to=self.cfg.get("trigger_rollouts"),
                        steps=self.cfg.get("trigger_span"))
            return info
        old = self.current_plan
        ex = self.examples[self.ctx.task_type][: self.cfg.examples]
        out = self.llm.complete(prompts.replan_prompt(ex, self.ctx.intro, self.executed, self.notes(self.ctx)),
                                max_tokens=self.cfg.plan_max_tokens, stop=["\n"], temperature=0.0)
        text = " ".join(out[0].text.split())
        self.current_plan = "1. " + text if text else old
        if self.plan() is not None:  # the actor reads the plan: its prompt's fixed part changes
            self.prefix = prompts.actor_prefix(ex, self.ctx.intro, self.notes(self.ctx), self.plan())
        info.update(old_plan=old, new_plan=self.current_plan, actor_prompt_changed=self.plan() is not None)
        return info

    def select(self, texts: Sequence[str], admissible: Sequence[str] | None, prompt: str = "") -> Decision:
        """The agent's own part of a step (no LLM generation, no env): parse the rollouts, map their
        first actions (the proposals needing the encoder in one batched call), score the chunks with
        M_sa (one batched encoder call, duplicates once, LRU-cached texts skipped) and pick one."""
        return self._select(texts, admissible, prompt)

    def _select(self, texts: Sequence[str], admissible: Sequence[str] | None, prompt: str,
                pick: int | None = None,
                map_firsts: Callable[[list[str], Sequence[str] | None, str], list[Mapped]] | None = None,
                completions: Sequence[Any] | None = None,
                ) -> Decision:
        """``pick``: the rollout index MUSE-random drew before decoding only that rollout (``texts``
        is then that one rollout). ``map_firsts(proposals, admissible, prompt)``: how the rollouts'
        first actions are mapped (default: the mapper's one batched call; the benchmark's anchor,
        bench/anchors/muse_select_unbatched.py, maps them one call each). ``completions``: the
        rollouts' completions (their token log-probabilities give the executed line's)."""
        assert self.ctx is not None
        t_agent = time.perf_counter()
        size = getattr(self.scorer.config, "chunk_size", 4)
        rollouts = []
        for text in texts:
            pairs = parse_rollout(text, self.cfg.rollout_pairs)
            rollouts.append([p for p in pairs if not p[0].lower().startswith("think:")]
                            or [(clean_action(text) or "look", "")])
        proposed = [r[0][0] for r in rollouts]
        firsts = (map_firsts or self.mapper.map_many)(proposed, admissible, prompt)
        map_s = sum(m.seconds for m in firsts)
        chunks = []
        for pairs, m in zip(rollouts, firsts):
            pairs[0] = (m.action, pairs[0][1])
            keep = max(0, size - len(pairs))
            chunks.append((self.executed[-keep:] if keep else []) + pairs[:size])
        scores = self.scorer.score(self.ctx.task, self.current_plan, chunks)
        greedy = bool(self.cfg.greedy_candidate) and pick is None
        extra: dict[str, Any] = {}
        if pick is not None:
            i = 0
        elif self.select_mode == "highest" and greedy and len(scores) > 1:
            j = 1 + int(np.argmax(scores[1:]))
            gap = float(scores[j] - scores[0])
            replaced = gap > 0.0 and gap >= self.cfg.get("select_margin")
            i = j if replaced else 0
            extra = {"greedy_replaced": replaced, "greedy_gap": gap,
                     "greedy_action_changed": firsts[i].action != firsts[0].action}
        elif self.select_mode == "highest":
            i = int(np.argmax(scores))
        elif self.select_mode == "lowest":
            i = int(np.argmin(scores))
        else:
            i = int(self.rng.integers(len(scores)))
        chosen = firsts[i]
        agent_s = time.perf_counter() - t_agent
        info = {"rollouts": [[list(p) for p in r] for r in rollouts], "scores": [float(x) for x in scores],
                "chosen": i if pick is None else pick, "mapped": [m.how for m in firsts], "select_seconds": agent_s,
                **extra}
        if self.cfg.greedy_candidate:
            info["greedy_candidate"] = True  # rollout 0 was decoded at temperature 0
        if pick is not None:
            info["decoded_only_pick"] = True
        if completions is not None:
            span = first_action_span(texts[i], proposed[i])
            lp = line_logprob(completions[i], *span) if span else None
            if lp:
                info.update(lp)
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
