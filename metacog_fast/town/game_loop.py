"""A game loop over a town :class:`~metacog_fast.town.engine.Simulation`: ``tick()`` never waits on the LLM.

``Simulation.step`` is a turn: every agent thinks, the step waits for all of them (or for its
budget), then everyone acts. A game cannot stop its frame for a 135M model. :class:`GameLoop`
splits the two:

* ``tick()`` (the game's thread) perceives, applies the decisions that have arrived since the
  last tick, asks for a new decision for every living agent that has none in flight, moves
  everyone (an agent without a new decision keeps its current plan: goes on to its target or
  stays), runs the scenario's non-player rules and records a frame. It touches no model and no
  store: a tick costs what the world costs.
* one *decider* thread takes every request waiting when it is free (a *round*): it commits the
  memories the ticks produced (one encoder call, one store add, importance ratings in one
  ``choose_many``), retrieves each requester's memories, and runs their ``think`` jobs together.
  The town's :class:`~metacog_fast.town.llm_adapter.SimLLM` in batched mode sends the jobs'
  calls as one ``choose_many`` / ``generate_many`` per round, and the llama.cpp backend keeps
  each agent's last prompt in its own KV stream, so an agent's next prompt evaluates only its
  new tokens (``metacog_fast.llm.llama_batch``).

A decision is computed from the world as it was when it was requested. When it arrives, an
action whose premise no longer holds (the one to talk to, invite or follow is dead; the one to
attack is out of reach) is not executed: the agent keeps its plan and the decision's mind (goal,
plan, target, strategy) is still adopted; ``stats()`` counts these as *invalidated*.

Measures (``stats()``): ticks per second and tick time p50/p95, decision latency (request to
application, seconds) p50/p95 overall and per agent, the share of agent-ticks acted on a *stale*
plan (a newer decision was requested and has not arrived), rounds and decisions per round. The
simulation's own ``plan_fallbacks`` counts, as in ``step()``, every agent-tick without a new decision.
"""
from __future__ import annotations

import gc
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metacog_fast.llm import BudgetExhausted
from metacog_fast.town.engine import Simulation
from metacog_fast.town.generative import Action, Decision, GenerativeAgent, StepContext


@dataclass(frozen=True)
class LoopConfig:
    """How the game loop asks for decisions."""

    decide_every: int = 1
    """Ticks between the arrival of an agent's decision and its next request (1: at once)."""
    max_round: int | None = None
    """Most requests one round takes (None: every waiting one); the rest wait for the next round."""
    freeze_gc: bool = True
    """``gc.freeze()`` when the loop starts (``gc.unfreeze()`` at ``close``): what exists then (the
    models, the world) leaves the cyclic collector's view. Its full collections scan the whole heap
    from the game's thread: without an LLM, 25 agents, 3,000 ticks, the longest tick was 306-308 ms
    unfrozen and 47-50 ms frozen (two runs each; p95 ~0.9-1.3 ms either way). Objects that exist at
    the start and become cyclic garbage later are not collected while frozen."""
    rated_per_round: int | None = 8
    """Most new memories whose importance one round asks the LLM for (the newest); the others are
    stored at the default importance 3. Ten ticks a second notice far more than a step does
    (measured with every memory rated, 25 agents: 258 of 362 LLM calls were importance ratings and
    a decision took 145 s); None rates every one."""

    def __post_init__(self) -> None:
        if int(self.decide_every) < 1:
            raise ValueError(f"decide_every: expected an integer >= 1, got {self.decide_every!r}")
        if self.max_round is not None and int(self.max_round) < 1:
            raise ValueError(f"max_round: expected None or an integer >= 1, got {self.max_round!r}")
        if self.rated_per_round is not None and int(self.rated_per_round) < 0:
            raise ValueError(f"rated_per_round: expected None or an integer >= 0, got {self.rated_per_round!r}")


@dataclass
class _Request:
    agent: GenerativeAgent
    ctx: StepContext
    query: str
    """The situation query its memories are retrieved with."""
    tick: int
    t: float
    """perf_counter() at the request."""


@dataclass
class _Arrival:
    decision: Decision | None
    """None: the think job failed or the LLM budget is spent (the agent keeps its plan)."""
    request: _Request
    t: float


@dataclass
class TickStats:
    """What one tick did."""

    seconds: float
    applied: int
    """Decisions applied this tick."""
    requested: int
    """Decisions requested this tick."""
    stale: int
    """Living agents that acted on their current plan while a newer decision was in flight."""
    invalidated: int
    """Arrived actions not executed because their premise no longer held."""


@dataclass
class _Counters:
    tick_seconds: list[float] = field(default_factory=list)
    agent_ticks: int = 0
    stale: int = 0
    invalidated: int = 0
    failed: int = 0
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    latency_ticks: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    round_sizes: list[int] = field(default_factory=list)
    round_seconds: list[float] = field(default_factory=list)


class GameLoop:
    """Drive ``sim`` by ``tick()``; decisions come from a background decider (module docstring).

    Use as a context manager or call :meth:`close`: the decider thread stops, a round in progress
    finishes first. The simulation itself stays open (``sim.close()`` is the caller's).
    """

    def __init__(self, sim: Simulation, config: LoopConfig | None = None) -> None:
        if sim.cfg.step_budget is not None:
            raise ValueError("sim: the game loop needs a Simulation without step_budget (it never waits on a step)")
        self.sim = sim
        self.cfg = config or LoopConfig()
        self.counters = _Counters()
        self._lock = threading.Condition()
        self._requests: list[_Request] = []
        self._arrived: list[_Arrival] = []
        self._memories: list[Any] = []
        self._importance: dict[str, float] = defaultdict(float)
        self._inflight: set[str] = set()
        self._next_due: dict[str, int] = {}
        self._decisions: dict[str, int] = defaultdict(int)
        self._stop = False
        self._error: BaseException | None = None
        self._thinking = sim.cfg.use_llm and sim.llm is not None
        self._froze = self.cfg.freeze_gc
        if self._froze:
            gc.collect()
            gc.freeze()
        self._thread = threading.Thread(target=self._decider, name="town-decider", daemon=True)
        if self._thinking:
            self._thread.start()

    # ------------------------------------------------------------------ the game's thread
    def tick(self) -> TickStats:
        """Advance the world one step without waiting for any model (module docstring)."""
        if self._error is not None:
            raise RuntimeError(f"the decider thread failed: {self._error!r}") from self._error
        sim = self.sim
        t0 = time.perf_counter()
        notices = sim.perceive()
        with self._lock:
            arrived, self._arrived = self._arrived, []
            importance, self._importance = self._importance, defaultdict(float)
        decisions: dict[str, Decision] = {}
        invalidated = 0
        now = time.perf_counter()
        for arr in arrived:
            a = arr.request.agent
            self._inflight.discard(a.name)
            self._next_due[a.name] = sim.step_no + self.cfg.decide_every - 1
            c = self.counters
            c.latency[a.name].append(now - arr.request.t)
            c.latency_ticks[a.name].append(sim.step_no - arr.request.tick)
            if arr.decision is None:
                c.failed += 1
                continue
            if not a.alive:
                continue
            if not self._still_possible(a, arr.decision.action):
                invalidated += 1
                arr.decision.action = self._keep_plan(a)
            decisions[a.name] = arr.decision
        for name, v in importance.items():
            a = sim.by_name.get(name)
            if a is not None:
                a.mind.importance_acc += v
        reqs = self._request(notices) if self._thinking and not sim.budget_spent else []
        alive = [a for a in sim.agents if a.alive]
        stale = sum(1 for a in alive if a.name in self._inflight and a.name not in decisions)
        sim.finish_step(sim.act(decisions))
        pending, sim.pending = sim.pending, []
        if pending or reqs:  # together: a round commits the memories of the tick that asked for it
            with self._lock:
                self._memories.extend(pending)
                self._requests.extend(reqs)
                self._lock.notify_all()
        dt = time.perf_counter() - t0
        c = self.counters
        c.tick_seconds.append(dt)
        c.agent_ticks += len(alive)
        c.stale += stale
        c.invalidated += invalidated
        return TickStats(dt, len(decisions), len(reqs), stale, invalidated)

    def run(self, ticks: int, hz: float | None = None, progress: Any = None) -> None:
        """``ticks`` ticks, paced at ``hz`` ticks per second (None: as fast as they go)."""
        if int(ticks) < 0:
            raise ValueError(f"ticks: expected an integer >= 0, got {ticks!r}")
        if hz is not None and not hz > 0:
            raise ValueError(f"hz: expected None or a positive rate, got {hz!r}")
        period = None if hz is None else 1.0 / hz
        next_t = time.perf_counter()
        for _ in range(int(ticks)):
            if not any(a.alive for a in self.sim.agents):
                break
            self.tick()
            if progress is not None:
                progress(self)
            if period is not None:
                next_t += period
                wait = next_t - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                else:
                    next_t = time.perf_counter()  # behind: no catch-up burst

    def _request(self, notices: dict[str, list[str]]) -> list[_Request]:
        """Requests for every living agent that is due, built from the world before it acts."""
        sim = self.sim
        due = [a for a in sim.agents if a.alive and a.name not in self._inflight
               and self._next_due.get(a.name, 0) <= sim.step_no]
        if not due:
            return []
        heads = {a.name: a.head(sim.sc.description) for a in sim.agents if a.alive}
        reqs = []
        t = time.perf_counter()
        for a in due:
            mine = notices.get(a.name, [])
            # the agent's own decision count paces its progress ratings and seeds its choices
            ctx = sim.context(a, mine, [], heads, step=self._decisions[a.name])
            self._decisions[a.name] += 1
            reqs.append(_Request(a, ctx, sim.situation_query(a, mine), sim.step_no, t))
            self._inflight.add(a.name)
        return reqs

    def _still_possible(self, a: GenerativeAgent, act: Action) -> bool:
        sim = self.sim
        if act.kind in ("talk", "invite", "follow", "attack"):
            b = sim.by_name.get(act.target or "")
            if b is None or not b.alive:
                return False
            reach = sim.sc.rules.get("kill_range", 0) if act.kind == "attack" else sim.sc.perception_range
            return act.kind == "follow" or (b.pos[0] - a.pos[0]) ** 2 + (b.pos[1] - a.pos[1]) ** 2 <= reach * reach
        return True

    @staticmethod
    def _keep_plan(a: GenerativeAgent) -> Action:
        return Action("continue", "continue", a.mind.target) if a.mind.target else Action("stay", "stay")

    # ------------------------------------------------------------------ the decider's thread
    def _decider(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._stop and not self._requests:
                        self._lock.wait()
                    if self._stop:
                        return
                    n = len(self._requests) if self.cfg.max_round is None else self.cfg.max_round
                    batch, self._requests = self._requests[:n], self._requests[n:]
                    memories, self._memories = self._memories, []
                self._round(batch, memories)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the next tick()
            self._error = exc

    def _round(self, batch: list[_Request], memories: list[Any]) -> None:
        sim = self.sim
        t0 = time.perf_counter()
        now = sim.now()
        if sim.cfg.features.memory:
            imp = sim.memory.importance(memories, self.cfg.rated_per_round)
            ids, q = sim.memory.commit(memories, now, [r.query for r in batch], imp)
            sim._note_provisional(memories, ids)
            gained: dict[str, float] = defaultdict(float)
            for m, v in zip(memories, imp):
                gained[m.agent] += v
            k = sim.cfg.agent.retrieve_k
            for i, r in enumerate(batch):
                r.ctx.memories = sim.memory.retrieve(r.agent.name, q[i: i + 1], k, now)[0]
            with self._lock:
                for name, v in gained.items():
                    self._importance[name] += v
        llm = sim.llm
        assert llm is not None
        if llm.batched:
            llm.expect(len(batch))
        futures = [(r, sim._pool.submit(self._think, r)) for r in batch]
        out = []
        for r, f in futures:
            try:
                d = f.result()
            except BudgetExhausted:
                sim.budget_spent = True
                d = None
            out.append(_Arrival(d, r, time.perf_counter()))
        with self._lock:
            self._arrived.extend(out)
            self.counters.round_sizes.append(len(batch))
            self.counters.round_seconds.append(time.perf_counter() - t0)

    def _think(self, r: _Request) -> Decision:
        llm = self.sim.llm
        assert llm is not None
        try:
            return r.agent.think(r.ctx, llm, self.sim.memory)
        finally:
            if llm.batched:
                llm.leave()

    # ------------------------------------------------------------------ results
    def stats(self) -> dict[str, Any]:
        """Ticks per second, tick time and decision latency percentiles, stale share (module docstring)."""
        c = self.counters
        ts = np.asarray(c.tick_seconds, float)
        lat = np.asarray([x for v in c.latency.values() for x in v], float)

        def pct(x: np.ndarray, q: float, scale: float = 1.0) -> float | None:
            return round(float(np.percentile(x, q)) * scale, 3) if len(x) else None

        return {
            "ticks": len(ts),
            "ticks_per_second": round(len(ts) / float(ts.sum()), 1) if len(ts) and ts.sum() > 0 else None,
            "tick_ms": {"p50": pct(ts, 50, 1e3), "p95": pct(ts, 95, 1e3), "max": pct(ts, 100, 1e3)},
            "decisions": int(len(lat)),
            "decision_seconds": {"p50": pct(lat, 50), "p95": pct(lat, 95)},
            "decision_seconds_per_agent": {n: {"n": len(v), "p50": pct(np.asarray(v), 50), "p95": pct(np.asarray(v), 95)}
                                           for n, v in sorted(c.latency.items())},
            "decision_ticks_p50": pct(np.asarray([x for v in c.latency_ticks.values() for x in v], float), 50),
            "stale_share": round(c.stale / c.agent_ticks, 4) if c.agent_ticks else None,
            "invalidated": c.invalidated,
            "failed": c.failed,
            "rounds": len(c.round_sizes),
            "decisions_per_round": round(float(np.mean(c.round_sizes)), 2) if c.round_sizes else None,
            "round_seconds_p50": pct(np.asarray(c.round_seconds), 50),
        }

    def close(self) -> None:
        """Stop the decider (a round in progress finishes) and apply nothing more."""
        with self._lock:
            self._stop = True
            self._lock.notify_all()
        if self._thread.is_alive():
            self._thread.join()
        if self._froze:
            self._froze = False
            gc.unfreeze()

    def __enter__(self) -> "GameLoop":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["GameLoop", "LoopConfig", "TickStats"]
