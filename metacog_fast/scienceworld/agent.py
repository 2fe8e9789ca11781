"""The dual-process episode loop: buffer first, then Swift; Sage on triggers; AMM and SRM by flag."""
from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from metacog_fast.envs.driver import STOP, play
from metacog_fast.envs.driver import Step as DriverStep
from metacog_fast.scienceworld.amm import AMM, EpisodicRecord, is_invalid, salience
from metacog_fast.scienceworld.config import AgentConfig
from metacog_fast.scienceworld.grounding import Gate1, ValidSet, candidate_actions
from metacog_fast.scienceworld.guards import FocusGuard, loop_guard_mask
from metacog_fast.scienceworld.sage import Critic, Sage
from metacog_fast.scienceworld.stagnation import Step, stagnation_signals
from metacog_fast.scienceworld.swift import LLMSwift, RankerSwift, SwiftState
from metacog_fast.scienceworld.text import room_of

if TYPE_CHECKING:
    from metacog_fast.envs.base import Env
    from metacog_fast.llm.protocol import LLM


@dataclass
class Mechanisms:
    """Mechanism counts of one episode."""

    memory_writes: int = 0
    t1: int = 0
    t4: int = 0
    gate1_checks: int = 0
    gate1_repairs: int = 0
    gate1_drops: int = 0
    critic_calls: int = 0
    sage_calls: int = 0
    swift_steps: int = 0
    buffer_steps: int = 0
    invalid_steps: int = 0
    stagnation_events: int = 0
    loop_steps: int = 0
    """Steps chosen while the loop guard masked a detected loop's actions."""
    focus_masked: int = 0
    """Buffered ``focus on`` actions the focus guard dropped (the Swift never sees a masked one)."""

    @property
    def system2_calls(self) -> int:
        return self.sage_calls + self.critic_calls


@dataclass
class EpisodeResult:
    """Everything persisted about one episode."""

    task: str
    variation: int
    config: str
    score: float
    """Final score clipped to [0, 100] (a failed task, -100 in the simulator, counts 0)."""
    raw_score: float
    won: bool
    steps: int
    errored: bool
    gold_len: int
    budget: int
    """Agent actions this episode was allowed (``AgentConfig.budget``)."""
    mechanisms: dict[str, int]
    llm_seconds: float
    env_seconds: float
    agent_seconds: float
    """Wall seconds of everything but LLM and environment calls."""
    llm_calls: int
    llm_tokens: int
    actions: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Sage plans and Critic diagnoses, in order."""
    sage_reasons: list[str] = field(default_factory=list)
    """Per step: why Sage was called before it ("start", "invalid", "stagnation", "loop",
    "low_margin"; "no_progress", "plan_every" with ``sage_trigger="fixed"``; comma-joined), "" when not."""
    rooms: list[str] = field(default_factory=list)
    """Rooms the agent was in, in the order first entered (the start room first; "" when unknown)."""
    simplifications: str = ""
    """ScienceWorld simplifications the episode was played with ("" = the paper's setting, "easy")."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class DualProcessAgent:
    """Swift + Sage (+ AMM, + SRM). ``swift``: RankerSwift or LLMSwift; ``amm``: AMM or None."""

    def __init__(self, cfg: AgentConfig, swift: RankerSwift | LLMSwift, llm: LLM, amm: AMM | None = None) -> None:
        cfg.validate()
        if cfg.use_amm and amm is None:
            raise ValueError("amm: this configuration uses AMM; pass an AMM over a memory store")
        self.cfg = cfg
        self.swift = swift
        self.llm = llm
        self.amm = amm if cfg.use_amm else None
        self.sage = Sage(llm, cfg.sage_plan_tokens, cfg.sage_actions)
        self.critic = Critic(llm, cfg.critic_budget, cfg.sage_plan_tokens)

    def run(self, env: Env, variation: int, config_name: str = "", write_memory: bool = True) -> EpisodeResult:
        cfg = self.cfg
        llm_s = 0.0
        env_s = 0.0
        calls0 = self.llm.usage.calls if hasattr(self.llm, "usage") else 0
        tok0 = self.llm.usage.total_tokens if hasattr(self.llm, "usage") else 0
        t_start = time.perf_counter()
        obs, info = env.reset(variation=variation)
        reset_s = time.perf_counter() - t_start
        env_s += reset_s
        task = info["task"]
        valid = list(info["admissible"])
        gold_len = len(getattr(env, "gold_path", []) or [])
        room = room_of(obs)
        score = float(info.get("score", 0.0))
        m = Mechanisms()
        gate = Gate1(cfg.repair_cutoff)
        focus = FocusGuard(task)
        rooms: list[str] = [room or ""]
        sage_reasons: list[str] = []
        looped: list[tuple[str, str]] = []  # (action, observation): a loop repeats both
        self.critic.reset()
        buffer: deque[tuple[str, str]] = deque()  # (action, "sage"|"critic")
        traj: list[Step] = []
        history: list[tuple[str, str]] = []
        executed: dict[str, int] = {}
        actions: list[str] = []
        sources: list[str] = []
        notes: list[str] = []
        last_action = ""
        last_sage = -10**9
        last_critic = -10**9
        no_progress = 0
        last_invalid = False
        swift_failed = False
        errored = False
        won = False
        t0 = time.perf_counter()
        budget = cfg.budget(gold_len)
        source = "swift"

        def policy(_obs: str, _info: dict[str, Any]) -> str:
            nonlocal llm_s, last_sage, last_critic, no_progress, source
            t = len(actions)
            cands = candidate_actions(valid, obs)
            vs = ValidSet(cands, room)
            loop_p, mask = loop_guard_mask(looped if cfg.loop_same_observations else actions, actions, cfg.loop_period,
                                           cfg.loop_repeats, cfg.loop_min_length, cfg.loop_wait_run)
            if not cfg.loop_guard:
                mask = set()
            allowed = [a for a in cands if a not in mask and (not cfg.focus_guard or focus.allowed(a))]
            if not allowed:  # everything masked: the guards give way rather than stop the episode
                allowed = cands
            state = SwiftState(task, obs, last_action, allowed, executed)
            if self.amm is not None and swift_failed:
                recs = self.amm.retrieve(task, room, obs)
                m.t1 += 1
                state.boosts = AMM.boosts(recs, vs.exact, cfg.t1_boost)
            reasons = (self._sage_reasons(t, last_invalid, no_progress, last_sage, loop_p, state)
                       if cfg.use_sage and not buffer else [])
            sage_reasons.append(",".join(reasons) if (reasons and not buffer) else "")
            if not buffer and reasons:
                memories: list[str] = []
                options = self.swift.candidates(state, cfg.sage_candidates)
                if self.amm is not None:
                    recs = self.amm.retrieve(task, room, obs)
                    m.t4 += 1
                    memories = [r.text() for r in recs]
                    for r in recs:
                        if r.type in ("success", "progress", "near_miss") and r.action in vs.exact and r.action not in options:
                            options.append(r.action)
                tl = time.perf_counter()
                d = self.sage.plan(task, obs, history[-cfg.history:], memories, options)
                llm_s += time.perf_counter() - tl
                m.sage_calls += 1
                last_sage = t
                no_progress = 0
                notes.append("sage: " + d.text)
                buffer.extend((a, "sage") for a in d.actions)
            if cfg.use_srm and not self.critic.exhausted and t - last_critic >= 2:
                signals = stagnation_signals(traj, cfg.stagnation_window)
                if signals:
                    m.stagnation_events += 1
                    recent = {s.action for s in traj[-cfg.stagnation_window:]}
                    cands = [a for a in self.swift.candidates(state, cfg.sage_candidates + len(recent)) if a not in recent]
                    if cands:
                        tl = time.perf_counter()
                        d = self.critic.correct(task, history[-cfg.history:], signals, cands[: cfg.sage_candidates])
                        llm_s += time.perf_counter() - tl
                        m.critic_calls += 1
                        last_critic = t
                        notes.append("critic: " + d.text)
                        buffer.clear()
                        buffer.extend((a, "critic") for a in d.actions)
            action = None
            source = "swift"
            while buffer:
                cand, _ = buffer.popleft()
                if cand in mask:
                    continue
                if cfg.focus_guard and not focus.allowed(cand):
                    m.focus_masked += 1
                    continue
                if cfg.use_srm:
                    g = gate(cand, vs)
                    if g.action is None:
                        continue
                    cand = g.action
                action, source = cand, "buffer"
                break
            if action is None:
                if self.swift.name == "llm":
                    tl = time.perf_counter()
                    action = self.swift.propose(state)
                    llm_s += time.perf_counter() - tl
                else:
                    action = self.swift.propose(state)
                if cfg.use_srm:
                    g = gate(action, vs)
                    action = g.action if g.action is not None else "look around"
            if mask:
                m.loop_steps += 1
            return action

        def observe(step: DriverStep) -> Any:
            nonlocal obs, score, room, valid, last_action, swift_failed, last_invalid, no_progress, errored, won
            action, obs2, info = step.action, step.obs, step.info
            new_score = float(info.get("score", score))
            errored = bool(info.get("errored", False))
            won = bool(info.get("won", False))
            delta = new_score - score
            invalid = is_invalid(obs2)
            if source == "buffer":
                m.buffer_steps += 1
            else:
                m.swift_steps += 1
            m.invalid_steps += int(invalid)
            new_room = room_of(obs2) or room
            if new_room and new_room not in rooms:
                rooms.append(new_room)
            if self.amm is not None and write_memory:
                kind = salience(action, obs2, delta, won, task)
                if kind is not None:
                    self.amm.write(EpisodicRecord(info.get("task_name", ""), new_room, actions[-3:], action, obs2[:300],
                                                  score, new_score, kind), task)
                    m.memory_writes += 1
            traj.append(Step(action, obs2, delta, new_room))
            history.append((action, obs2))
            executed[action] = executed.get(action, 0) + 1
            focus.executed(action)
            looped.append((action, obs2.strip()))
            actions.append(action)
            sources.append(source)
            swift_failed = source == "swift" and (invalid or delta < 0 or obs2.strip() == obs.strip())
            last_invalid = invalid
            no_progress = 0 if delta > 0 else no_progress + 1
            last_action, obs, score, room = action, obs2, new_score, new_room
            valid = list(info.get("admissible") or valid)
            return STOP if errored else None  # done and won end the episode in play()

        ep = play(env, policy, budget, start=(obs, info), stop_on_success=True, on_step=observe)
        env_s += ep.env_seconds
        info = ep.info
        total = time.perf_counter() - t0
        m.gate1_checks, m.gate1_repairs, m.gate1_drops = gate.stats.checked, gate.stats.repaired, gate.stats.dropped
        mech = asdict(m)
        mech["system2_calls"] = m.system2_calls
        usage = getattr(self.llm, "usage", None)
        return EpisodeResult(
            task=str(info.get("task_name", "")), variation=int(variation), config=config_name,
            score=max(0.0, min(100.0, score)), raw_score=score, won=won, steps=len(actions), errored=errored,
            gold_len=gold_len, budget=budget, mechanisms=mech, llm_seconds=llm_s, env_seconds=env_s,
            agent_seconds=max(0.0, total - llm_s - (env_s - reset_s)),
            llm_calls=(usage.calls - calls0) if usage else 0,
            llm_tokens=(usage.total_tokens - tok0) if usage else 0,
            actions=actions, sources=sources, notes=notes, sage_reasons=sage_reasons[: len(actions)], rooms=rooms,
            simplifications=str(getattr(getattr(env, "config", None), "simplifications", "") or ""),
        )

    def _sage_reasons(self, t: int, last_invalid: bool, no_progress: int, last_sage: int, loop_p: int,
                      state: SwiftState) -> list[str]:
        """Why Sage should be called at step ``t`` (empty: it should not), by ``cfg.sage_trigger``."""
        cfg = self.cfg
        out = []
        if t == 0:
            out.append("start")
        if last_invalid:
            out.append("invalid")
        if cfg.sage_trigger == "fixed":
            if no_progress >= cfg.no_progress_steps:
                out.append("no_progress")
            if t - last_sage >= cfg.plan_every:
                out.append("plan_every")
            return out
        if no_progress >= cfg.stagnation_steps:
            out.append("stagnation")
        if cfg.sage_on_loop and loop_p and t - last_sage > cfg.sage_actions:
            out.append("loop")
        if cfg.low_margin > 0:
            margin = swift_margin(self.swift, state)
            if margin is not None and margin < cfg.low_margin:
                out.append("low_margin")
        return out


def swift_margin(swift: RankerSwift | LLMSwift, state: SwiftState) -> float | None:
    """The ranker's top-1 minus top-2 logit at ``state`` (None without a ranker or with < 2 actions)."""
    ranker = swift if isinstance(swift, RankerSwift) else getattr(swift, "ranker", None)
    if ranker is None or len(state.valid) < 2:
        return None
    z = ranker.scores(state)
    top2 = np.partition(-z, 1)[:2]
    return float(top2[1] - top2[0])


def run_episode(env: Env, cfg: AgentConfig, swift: RankerSwift | LLMSwift, llm: LLM, variation: int, amm: AMM | None = None,
                config_name: str = "", write_memory: bool = True) -> EpisodeResult:
    """One episode of the dual-process agent on ``env`` (a ScienceWorld adapter)."""
    return DualProcessAgent(cfg, swift, llm, amm).run(env, variation, config_name, write_memory)
