"""The step loop of the town simulation.

One step (``Simulation.step``):
1. perception for every living agent in one vectorised pass (agents, zombies,
   objects, bodies within ``perception_range``); new observations (not already in
   the short-term memory) become pending memories;
2. memory: the step's pending memories and every agent's situation query are
   embedded in ONE encoder call, added in ONE ``MemoryStore.add`` call, then each
   agent's memories are retrieved (``config.batched=False`` does all this per agent:
   the unbatched baseline of the benchmark);
3. thinking: every agent's :meth:`GenerativeAgent.think` runs in a thread pool
   (LLM calls concurrent over HTTP, serialised on the embedded model); after
   ``step_budget`` seconds from the start of the step it goes on (importance ratings may use
   a quarter of it, later ones land as corrections), pending jobs are cancelled, and an agent
   without an answer continues its current plan;
4. acting: movement along shortest paths, conversations, object use, scenario
   actions; then the scenario's non-player rules (zombies);
5. a frame for the replay viewer and timings of every phase.
"""
from __future__ import annotations

import concurrent.futures as cf
import datetime as _dt
import os
import random
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from metacog_fast.town.generative import Action, AgentConfig, Decision, Features, GenerativeAgent, StepContext
from metacog_fast.town.generative.memory import MemoryStream, PendingMemory, ThreadSafeEncoder
from metacog_fast.llm import BudgetExhausted
from metacog_fast.memory import MemoryStore, ShortTermMemory
from metacog_fast.memory.lockfile import StoreLock
from metacog_fast.town import mechanics as mech
from metacog_fast.town.llm_adapter import SimLLM, StepCancelled
from metacog_fast.town.loader import Scenario
from metacog_fast.town.rules import ZombieHorde, ZombieRules, flee_cell
from metacog_fast.town.world import visible_pairs

if TYPE_CHECKING:
    from metacog_fast.llm.grounding import TextEncoder


@dataclass
class SimConfig:
    """Settings of one simulation run."""

    features: Features = field(default_factory=Features)
    """Cognitive modules switched on."""
    agent: AgentConfig = field(default_factory=AgentConfig)
    """Agent settings."""
    step_budget: float | None = None
    """Seconds the thinking phase of a step may take (None = wait for every agent)."""
    llm_workers: int = 8
    """Threads running agents' thinking jobs."""
    max_llm_calls: int | None = None
    """LLM call budget of the run (None = unlimited); past it agents follow their plans."""
    batched: bool = True
    """Batch all agents' embeddings and retrievals of a step (False: per agent, the baseline)."""
    use_llm: bool = True
    """False: no thinking phase (agents follow plans) - measures the simulation without the LLM."""
    max_seek: int = 3
    """Most people a control-mode ``meta_cognize`` offers to seek out (most recently seen first)."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_seek, int) or isinstance(self.max_seek, bool) or self.max_seek < 0:
            raise ValueError(f"max_seek: expected an integer >= 0, got {self.max_seek!r}")


@dataclass
class StepTiming:
    """Seconds spent in each phase of one step."""

    perception: float = 0.0
    memory: float = 0.0
    """Importance lookup, store add and retrieval (encoder excluded)."""
    embedding: float = 0.0
    """MiniLM encoder calls of the memory phase."""
    importance_llm: float = 0.0
    """LLM ratings of new memories' importance."""
    llm: float = 0.0
    """Thinking phase (LLM calls of all agents, concurrent)."""
    acting: float = 0.0
    """Actions, scenario rules, bookkeeping, frame."""
    cpu_outside_llm: float = 0.0
    """CPU time of the simulation thread in perception, memory (encoder excluded) and acting:
    the work itself, unaffected by waiting for a CPU on a loaded machine."""

    @property
    def outside_llm(self) -> float:
        """Perception + memory bookkeeping and retrieval + acting (no encoder, no LLM)."""
        return self.perception + self.memory + self.acting


class Simulation:
    """A scenario being simulated. ``run()`` steps it to the end; ``frames`` and ``log`` record it."""

    def __init__(self, scenario: Scenario, llm: SimLLM | None, encoder: TextEncoder, out_dir: str,
                 config: SimConfig | None = None) -> None:
        self.sc = scenario
        self.cfg = config or SimConfig()
        self.llm = llm
        if llm is None and self.cfg.use_llm:
            raise ValueError("llm: expected a SimLLM when config.use_llm is True")
        if llm is not None:
            llm.reset(self.cfg.max_llm_calls)
        self.out_dir = out_dir
        os.makedirs(out_dir, exist_ok=True)
        self.world = scenario.world
        self.rng = random.Random(scenario.seed)
        self.encoder = encoder if isinstance(encoder, ThreadSafeEncoder) else ThreadSafeEncoder(encoder)
        store_path = os.path.join(out_dir, "memory.sqlite")
        # A run starts from an empty memory; take the store's lock before deleting the last run's
        # files, so a simulation still running in this folder is refused instead of losing them.
        lock = StoreLock(store_path).acquire()
        try:
            for suffix in ("", "-wal", "-shm", ".hnsw", ".hnsw.json", ".hnsw.crc"):
                if os.path.exists(store_path + suffix):
                    os.remove(store_path + suffix)
        finally:
            lock.release()
        self.store = MemoryStore.open(store_path, dim=384, synchronous="NORMAL", verify_checksum=False)
        self.memory = MemoryStream(self.store, self.encoder, ShortTermMemory(), self._rate_importance)
        self.agents = [GenerativeAgent(a.name, a.description, a.personality, a.goal, a.role, a.position,
                                       self.cfg.features, self.cfg.agent) for a in scenario.agents]
        self.by_name = {a.name: a for a in self.agents}
        self.places = [loc.name for loc in self.world.locations]
        self.step_no = 0
        self.frames: list[dict[str, Any]] = []
        self.log: list[dict[str, Any]] = []
        self.timings: list[StepTiming] = []
        self.pending: list[PendingMemory] = []
        self.events_prev: list[tuple[str, list[str]]] = []  # (text, witnesses-or-[]=all-nearby)
        self.bodies: list[tuple[str, tuple[int, int]]] = []
        self.late = 0
        self._deadline = 0.0
        self._late_lock = threading.Lock()
        self._provisional: dict[str, list[int]] = {}
        self.fallbacks = 0
        self.budget_spent = False
        workers = max(1, self.cfg.llm_workers)
        if llm is not None and llm.batched:
            workers = max(workers, len(self.agents))  # every agent waits in the same round
        self._pool = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agent")
        rules = scenario.rules
        self.horde: ZombieHorde | None = None
        if rules["type"] == "zombie":
            self.horde = ZombieHorde(self.world, ZombieRules(rules["zombies"], rules["zombie_range"], rules["kill_range"],
                                                             rules["zombie_speed"]),
                                     rules["zombie_free"], rules.get("zombie_start", []), self.rng)
        self.party_attended: set[str] = set()
        self.party_attended_informed: set[str] = set()
        """Guests at the party's place in its window who knew of the party then (invited or told)."""
        self.invited: set[str] = set()
        self.accusations: list[tuple[int, str, str]] = []
        self.kills: list[tuple[int, str, str]] = []
        self.last_kill_step = -10**9
        self.intentions: Counter[str] = Counter()
        """Outcomes of the seeking intentions: found, lost, interrupted (a threat in sight), and what
        finding did (invited, facts told)."""
        for a in self.agents:  # a small town: everybody knows where everybody starts the day
            a.last_seen = {b.name: (self.place_of(b.pos), 0, b.pos) for b in self.agents if b is not a}
        if rules["type"] == "party":
            host = self.by_name[rules["host"]]
            host.knows.add("party")
            for n in rules.get("invited", []):
                self.by_name[n].knows.add("party")
                self.invited.add(n)
        self._record_frame([])

    # ------------------------------------------------------------------ time
    def now(self, step: int | None = None) -> float:
        return float(self.step_no if step is None else step) * self.sc.seconds_per_step

    def clock(self) -> str:
        t0 = _dt.datetime.fromisoformat(self.sc.start_time)
        return (t0 + _dt.timedelta(seconds=self.now())).strftime("%H:%M")

    def place_of(self, pos: tuple[int, int]) -> str:
        return self.world.location_at(*pos) or "street"

    # ------------------------------------------------------------------ LLM helpers
    def _rate_importance(self, pairs: list[tuple[str, str]]) -> list[int | None]:
        if not self.cfg.use_llm or self.llm is None or self.budget_spent:
            return [None] * len(pairs)
        from metacog_fast.town.generative import prompts as P

        if self.llm.batched and pairs:
            try:  # all of the step's ratings in one call
                return list(self.llm.rate_many([P.importance(p[0], p[1]) for p in pairs], "importance"))
            except BudgetExhausted:
                self.budget_spent = True
                return [None] * len(pairs)

        def one(p: tuple[str, str]) -> int | None:
            try:
                return self.llm.rate(P.importance(p[0], p[1]), "importance")
            except BudgetExhausted:
                self.budget_spent = True
                return None

        futures = [self._pool.submit(one, p) for p in pairs]
        # Importance ratings may use a quarter of the step budget; thinking gets the rest.
        done, _ = cf.wait(futures, timeout=None if self.cfg.step_budget is None else self._remaining() * 0.25)
        out: list[int | None] = []
        for f, (_, text) in zip(futures, pairs):
            if f in done:
                out.append(f.result())
            else:
                # Past the step budget: stored with a provisional importance, corrected when the rating lands.
                out.append(None)
                f.add_done_callback(lambda fut, t=text: self._late_importance(t, fut))
        return out

    def _late_importance(self, text: str, fut: cf.Future) -> None:
        if fut.cancelled() or fut.exception() is not None or fut.result() is None:
            return
        value = int(min(10, max(1, fut.result())))
        with self._late_lock:
            self.memory.importance_cache[text] = value
            ids = self._provisional.pop(text, [])
        if ids:
            self.store.update_importance(ids, float(value))

    def _note_provisional(self, items: list[PendingMemory], ids: np.ndarray) -> None:
        """Remember ids stored with a provisional importance (rating still running)."""
        with self._late_lock:
            for i, m in zip(ids.tolist(), items):
                if m.importance is None and m.text not in self.memory.importance_cache:
                    self._provisional.setdefault(m.text, []).append(i)

    # ------------------------------------------------------------------ perception
    def perceive(self) -> dict[str, list[str]]:
        """Notices per living agent; new ones (not in short-term memory) become pending observations."""
        alive = [a for a in self.agents if a.alive]
        notices: dict[str, list[str]] = {a.name: [] for a in alive}
        if not alive:
            return notices
        xy = np.array([a.pos for a in alive], np.int32)
        r = self.sc.perception_range
        if self.cfg.batched:
            see_agents = visible_pairs(xy, xy, r)
            see_z = visible_pairs(xy, self.horde.pos, r) if self.horde is not None and len(self.horde.pos) else None
        else:
            see_agents = np.array([[float(((xy[i] - xy[j]) ** 2).sum()) <= r * r for j in range(len(alive))]
                                   for i in range(len(alive))], bool).reshape(len(alive), len(alive))
            see_z = None
            if self.horde is not None and len(self.horde.pos):
                see_z = np.array([[float(((xy[i] - z) ** 2).sum()) <= r * r for z in self.horde.pos]
                                  for i in range(len(alive))], bool)
        body_xy = np.array([p for _, p in self.bodies], np.int32).reshape(-1, 2)
        see_b = visible_pairs(xy, body_xy, r) if len(body_xy) else None
        safe = self.horde.in_safe(xy) if self.horde is not None else np.zeros(len(alive), bool)
        for i, a in enumerate(alive):
            place = self.place_of(a.pos)
            lines = notices[a.name]
            for j in np.flatnonzero(see_agents[i]):
                if j != i:
                    b = alive[j]
                    where = self.place_of(b.pos)
                    lines.append(f"{b.name} is at the {where}")
                    a.last_seen[b.name] = (where, self.step_no, b.pos)
            if see_z is not None:
                zs = np.flatnonzero(see_z[i])
                if len(zs):
                    where = sorted({self.place_of(tuple(self.horde.pos[z])) for z in zs})
                    lines.append(f"{len(zs)} zombie{'s' if len(zs) > 1 else ''} near the {', '.join(where)}")
            if safe[i]:
                lines.append(f"zombies cannot get into the {place}; it is safe here")
            if see_b is not None:
                for k in np.flatnonzero(see_b[i]):
                    lines.append(f"{self.bodies[k][0]} lies dead at the {self.place_of(self.bodies[k][1])}")
            for o in self.world.objects_near(a.pos[0], a.pos[1], 2.0):
                lines.append(f"a {o.name} is here")
            for text, witnesses in self.events_prev:
                if a.name in witnesses:
                    lines.append(text)
            if self.sc.rules["type"] == "party" and "party" in a.knows:
                ru = self.sc.rules
                lines.append(f"the Christmas party is at the {ru['location']} at step {ru['start_step']}"
                             f" ({self._clock_at(ru['start_step'])})")
            for who, victims in mech.evidence_against(a.knows).items():
                lines.append(f"{who} attacked {', '.join(victims)}")
        self.events_prev = []
        now = self.now()
        stm = self.memory.short_term
        for a in alive:
            live = {it.item for it in stm.items(a.name, now)}
            for line in notices[a.name]:
                if line not in live:
                    stm.add(a.name, line, now)
                    self.pending.append(PendingMemory(a.name, f"{a.name} noticed: {line}", "observation",
                                                      self.place_of(a.pos)))
        return notices

    def _clock_at(self, step: int) -> str:
        t0 = _dt.datetime.fromisoformat(self.sc.start_time)
        return (t0 + _dt.timedelta(seconds=step * self.sc.seconds_per_step)).strftime("%H:%M")

    # ------------------------------------------------------------------ memory
    def situation_query(self, a: GenerativeAgent, notices: list[str]) -> str:
        return f"{a.mind.goal or self.sc.description} {'; '.join(notices[:2])}".strip()

    def memory_phase(self, notices: dict[str, list[str]], t: StepTiming) -> dict[str, list[str]]:
        alive = [a for a in self.agents if a.alive]
        items, self.pending = self.pending, []
        if not self.cfg.features.memory:
            # Short-term memory only: nothing enters the long-term stream.
            return {a.name: [] for a in alive}
        now = self.now()
        k = self.cfg.agent.retrieve_k
        e0, t0 = self.encoder.seconds, time.perf_counter()
        ti0 = time.perf_counter()
        imp = self.memory.importance(items)
        ti = time.perf_counter() - ti0
        out: dict[str, list[str]] = {}
        if self.cfg.batched:
            queries = [self.situation_query(a, notices.get(a.name, [])) for a in alive]
            ids, q = self.memory.commit(items, now, queries, imp)
            self._note_provisional(items, ids)
            for i, a in enumerate(alive):
                out[a.name] = self.memory.retrieve(a.name, q[i: i + 1], k, now)[0]
        else:
            for a in alive:
                sel = [j for j, m in enumerate(items) if m.agent == a.name]
                mine = [items[j] for j in sel]
                ids, q = self.memory.commit(mine, now, [self.situation_query(a, notices.get(a.name, []))],
                                            [imp[j] for j in sel])
                self._note_provisional(mine, ids)
                out[a.name] = self.memory.retrieve(a.name, q, k, now)[0]
        for m, v in zip(items, imp):
            a = self.by_name.get(m.agent)
            if a is not None:
                a.mind.importance_acc += v
        total = time.perf_counter() - t0
        t.embedding += self.encoder.seconds - e0
        t.importance_llm += ti
        t.memory += total - (self.encoder.seconds - e0) - ti
        return out

    # ------------------------------------------------------------------ options
    def options(self, a: GenerativeAgent, notices: list[str]) -> list[Action]:
        """The agent's action options, at most ``max_options``.

        An agent on its way to a target it has not reached is offered "keep going" and no other
        place: a step's choice does not re-target it (run 3's agents, re-choosing a place every
        step, walked back and forth and never arrived; results/sim/diagnosis/run3.md). The target
        changes through the plan, ``meta_cognize``, fleeing, or a scenario option (the party).
        Scenario options and ``meta_cognize`` are never cut to fit ``max_options``: places,
        conversations and objects are."""
        m = a.mind
        rules = self.sc.rules
        here = self.place_of(a.pos)
        en_route = bool(m.target) and here != m.target
        party_opt, party_keep = None, None
        if rules["type"] == "party" and mech.PARTY in a.knows:
            party_opt, party_keep = mech.party_options(self.step_no, rules, here, m.target)
        first: list[Action] = []
        if en_route:
            first.append(Action("continue", party_keep or f"keep going to the {m.target}", m.target))
        if party_opt is not None and party_opt.kind == "stay":
            first.append(Action("stay", party_opt.label, here))
        elif not en_route:
            first.append(Action("stay", "stay where I am"))
        if len(self._threats_near(a)):
            first.append(Action("flee", "run away from the zombies"))
        if party_opt is not None and party_opt.kind == "move":
            first.append(party_opt)
        near = self._agents_near(a, self.sc.perception_range)
        if rules["type"] == "mystery":
            first += self._mystery_options(a, near)
        if rules["type"] == "party" and mech.PARTY in a.knows:
            for b in near:
                if b.name not in self.invited and b.name != rules["host"]:
                    first.append(Action("invite", f"invite {b.name} to the Christmas party", b.name))
                    break
        rest: list[Action] = []
        if not en_route:
            party_loc = rules.get("location") if party_opt is not None else None
            others = sorted((p for p in self.places if p != here and p != m.target and p != party_loc),
                            key=lambda p: abs(self.world.location_field(p)[a.pos[1], a.pos[0]]))
            rest += [Action("move", f"go to the {p}", p) for p in others[:3]]
        rest += [Action("talk", f"talk to {b.name}", b.name) for b in near[:2]]
        rest += [Action("use", f"{o.actions[0]} the {o.name}", o.name)
                 for o in self.world.objects_near(a.pos[0], a.pos[1], 2.0)[:1]]
        last = [Action("meta_cognize", "stop and think about my goal and strategy (meta_cognize)")] \
            if self.cfg.features.metacognition else []
        room = max(0, self.cfg.agent.max_options - len(first) - len(last))
        return (first + rest[:room] + last)[: max(self.cfg.agent.max_options, len(first) + len(last))]

    def _mystery_options(self, a: GenerativeAgent, near: list[GenerativeAgent]) -> list[Action]:
        """The murderer: attack someone within ``kill_range``, else follow the nearest person in
        sight (run 3's murderer stood next to someone in 4 of 300 steps); both only after the
        cooldown. The detective: accuse each person it holds evidence against (seen or told)."""
        rules = self.sc.rules
        out: list[Action] = []
        if a.role == "murderer" and self.step_no - self.last_kill_step >= rules["kill_cooldown"]:
            reach = self._agents_near(a, rules["kill_range"])
            if reach:
                out.append(Action("attack", f"attack {reach[0].name}", reach[0].name))
            elif near:
                out.append(Action("follow", f"follow {near[0].name}", near[0].name))
        if a.role == "detective":
            for suspect in mech.evidence_against(a.knows):
                if suspect != a.name and suspect in self.by_name:
                    out.append(Action("accuse", f"accuse {suspect} of murder", suspect))
        return out

    def _agents_near(self, a: GenerativeAgent, radius: float) -> list[GenerativeAgent]:
        out = [b for b in self.agents if b.alive and b is not a
               and (b.pos[0] - a.pos[0]) ** 2 + (b.pos[1] - a.pos[1]) ** 2 <= radius * radius]
        return sorted(out, key=lambda b: (b.pos[0] - a.pos[0]) ** 2 + (b.pos[1] - a.pos[1]) ** 2)

    def _threats_near(self, a: GenerativeAgent) -> np.ndarray:
        if self.horde is None or not len(self.horde.pos):
            return np.empty((0, 2), np.int32)
        d2 = ((self.horde.pos - np.array(a.pos)) ** 2).sum(1)
        return self.horde.pos[d2 <= self.sc.perception_range ** 2]

    # ------------------------------------------------------------------ thinking
    def think_phase(self, notices: dict[str, list[str]], memories: dict[str, list[str]]) -> dict[str, Decision]:
        alive = [a for a in self.agents if a.alive]
        if not self.cfg.use_llm or self.llm is None or self.budget_spent:
            return {}
        premise = self.sc.description
        heads = {a.name: a.head(premise) for a in alive}
        cancel = threading.Event()
        futures: dict[cf.Future, GenerativeAgent] = {}
        if self.llm.batched:
            self.llm.expect(len(alive))  # every agent's calls join the same rounds
        for a in alive:
            ctx = self.context(a, notices.get(a.name, []), memories.get(a.name, []), heads)
            futures[self._pool.submit(self._think_job, a, ctx, cancel)] = a
        done, not_done = cf.wait(futures, timeout=None if self.cfg.step_budget is None else self._remaining())
        cancel.set()
        for f in not_done:
            if f.cancel() and self.llm.batched:
                self.llm.leave()  # never started: it will make no calls
        self.late += len(not_done)
        out: dict[str, Decision] = {}
        for f in done:
            a = futures[f]
            try:
                out[a.name] = f.result()
            except BudgetExhausted:
                self.budget_spent = True
            except StepCancelled:
                pass
        return out

    def context(self, a: GenerativeAgent, notices: list[str], memories: list[str], heads: dict[str, str],
                step: int | None = None) -> StepContext:
        """What agent ``a`` is given to think about now: its notices and short-term memory, the
        retrieved ``memories``, its options, and the prompt heads of the agents it may talk to
        (``heads``: name -> :meth:`GenerativeAgent.head`). ``step``: the step its rating cadence
        and seeded choices count (default: the simulation's step)."""
        stm = [it.item for it in self.memory.short_term.items(a.name, self.now())]
        return StepContext(
            step=self.step_no if step is None else step, now=self.now(), clock=self.clock(),
            place=self.place_of(a.pos), premise=self.sc.description,
            notices=_dedupe(notices + stm)[:8], memories=memories, options=self.options(a, notices),
            places=self.places, meta_questions=self.sc.meta_questions or ["How can I make progress toward my goal?"],
            listener_heads={b.name: heads[b.name] for b in self._agents_near(a, self.sc.perception_range)},
            controls=self.controls(a) if self.cfg.features.metacognition and self.cfg.agent.meta_mode == "control" else [],
        )

    def controls(self, a: GenerativeAgent) -> list[Action]:
        """What ``meta_cognize`` may choose in control mode, in short parallel words: keep the plan;
        go to the scenario's place (the party, for who knows it; the zombie-free places); seek out
        up to ``max_seek`` living people out of sight whose whereabouts ``a`` knows (most recently
        seen first, then nearest) with the purpose the scenario gives (the host and the guests who
        know the party: invite the uninvited; the murderer: approach; the detective and everyone
        else: ask for help). Whoever is in sight is reached through the step's options instead
        (offered as a control, agents sought the person next to them every step). Only an agent
        without a scenario purpose is also offered the two nearest other places (offered to
        everyone, they were taken in 29 of 29 choices; docs/sim.md "Metacognition through control").
        While a threat (a zombie) is in sight, only keep and the safe places are offered."""
        rules = self.sc.rules
        here = self.place_of(a.pos)
        out = [Action("keep", "keep going with my current plan")]
        party = rules["type"] == "party" and mech.PARTY in a.knows and mech.party_phase(self.step_no, rules) != "after"
        goal_places = [rules["location"]] if party else list(rules.get("zombie_free", []))
        for p in goal_places:
            if p != here:
                out.append(Action("move", f"go to the party at the {p}" if party else f"go to the {p}", p))
        if len(self._threats_near(a)):
            return out  # no walk to someone through the danger in sight (docs/sim.md, the zombie)
        in_sight = {b.name for b in self._agents_near(a, self.sc.perception_range)}
        known = sorted((b for b in self.agents if b is not a and b.alive and b.name in a.last_seen
                        and b.name not in in_sight),
                       key=lambda b: (-a.last_seen[b.name][1], mech.distance(a.pos, a.last_seen[b.name][2]), b.name))
        murderer = rules["type"] == "mystery" and a.role == "murderer"
        detective = rules["type"] == "mystery" and a.role == "detective"
        for b in known[: self.cfg.max_seek]:
            if party and b.name != rules["host"] and b.name not in self.invited:
                out.append(Action("seek", f"invite {b.name} to the party", b.name, "invite"))
            elif murderer:
                out.append(Action("seek", f"find {b.name}", b.name, "approach"))
            elif detective:
                out.append(Action("seek", f"ask {b.name} what they saw", b.name, "talk"))
            else:
                out.append(Action("seek", f"ask {b.name} for help", b.name, "talk"))
        if not (goal_places or party or murderer or detective):
            others = sorted((p for p in self.places if p not in (here, a.mind.target)),
                            key=lambda p: abs(self.world.location_field(p)[a.pos[1], a.pos[0]]))
            out += [Action("move", f"go to the {p}", p) for p in others[:2]]
        return out

    def _think_job(self, a: GenerativeAgent, ctx: StepContext, cancel: threading.Event) -> Decision:
        assert self.llm is not None
        if not self.llm.batched:
            return a.think(ctx, self.llm, self.memory, cancel)
        try:
            return a.think(ctx, self.llm, self.memory, cancel)
        finally:
            self.llm.leave()

    # ------------------------------------------------------------------ acting
    def act(self, decisions: dict[str, Decision]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        occupied = {a.pos for a in self.agents if a.alive}
        for a in self.agents:
            if not a.alive:
                continue
            d = decisions.get(a.name)
            if d is None:
                self.fallbacks += 1
                act = Action("continue", "continue", a.mind.target) if a.mind.target else Action("stay", "stay")
            else:
                a.apply(d, self.step_no)
                self.pending.extend(d.memories)
                act = d.action
                for kind, text in d.events:
                    events.append({"agent": a.name, "kind": kind, "text": text})
            pursued = a.mind.seek is not None
            if pursued:
                act = self._pursue(a, events)
            a.action = act
            occupied.discard(a.pos)
            invited = len(self.invited)
            self._execute(a, act, d, events)
            if pursued:
                self.intentions["invited"] += len(self.invited) - invited
            occupied.add(a.pos)
        return events

    def _execute(self, a: GenerativeAgent, act: Action, d: Decision | None, events: list[dict[str, Any]]) -> None:
        place = self.place_of(a.pos)
        speed = self.sc.agent_speed
        if act.kind in ("continue", "move") and act.target in self.places:
            if act.kind == "move":
                a.mind.target = act.target
            a.pos = self.world.step_towards(a.pos, self.world.location_field(act.target), speed)
        elif act.kind == "stay" and act.target in self.places:
            a.mind.target = act.target  # staying at a place (the party) ends any trip elsewhere
        elif act.kind == "follow" and act.target in self.by_name and self.by_name[act.target].alive:
            a.pos = mech.follow_step(self.world, a.pos, self.by_name[act.target].pos, speed)
        elif act.kind == "flee":
            a.pos = flee_cell(self.world, a.pos, self._threats_near(a), speed)
        elif act.kind == "use":
            self.pending.append(PendingMemory(a.name, f"{a.name} used the {act.target} at the {place}", "observation", place))
        elif act.kind == "talk" and d is not None:
            for speaker, listener, line in d.utterances:
                text = f"{speaker} said to {listener}: \"{line}\""
                for who in (speaker, listener):
                    if who in self.by_name and self.by_name[who].alive:
                        self.pending.append(PendingMemory(who, text, "conversation", place))
                events.append({"agent": speaker, "kind": "talk", "text": text})
            if act.target in self.by_name and self.by_name[act.target].alive:
                self._share(a, self.by_name[act.target], events)
        elif act.kind == "invite" and act.target in self.by_name:
            self._invite(a, self.by_name[act.target], events)
        elif act.kind == "ask" and act.target in self.by_name and self.by_name[act.target].alive:
            b = self.by_name[act.target]
            text = f"{a.name} asked {b.name} for help with: {a.mind.goal or 'the day'}"
            for who in (a, b):
                self.pending.append(PendingMemory(who.name, text, "conversation", place))
            events.append({"agent": a.name, "kind": "talk", "text": text})
            n = len(events)
            self._share(a, b, events)
            self.intentions["facts_shared"] += sum(e["kind"] in ("tell", "invite") for e in events[n:])
        elif act.kind == "attack" and act.target in self.by_name:
            v = self.by_name[act.target]
            if v.alive:
                v.alive = False
                self.bodies.append((v.name, v.pos))
                self.kills.append((self.step_no, a.name, v.name))
                self.last_kill_step = self.step_no
                witnesses = [b.name for b in self._agents_near(v, self.sc.perception_range) if b is not a]
                for w in witnesses:
                    self.by_name[w].knows.add(mech.attack_fact(a.name, v.name))
                self.events_prev.append((f"saw {a.name} attack {v.name} at the {place}", witnesses))
                events.append({"agent": a.name, "kind": "attack", "text": f"{a.name} killed {v.name} at the {place}"})
        elif act.kind == "accuse" and act.target:
            self.accusations.append((self.step_no, a.name, act.target))
            witnesses = [b.name for b in self._agents_near(a, self.sc.perception_range)]
            self.events_prev.append((f"{a.name} accused {act.target} of murder", witnesses))
            events.append({"agent": a.name, "kind": "accuse", "text": f"{a.name} accused {act.target}"})

    def _pursue(self, a: GenerativeAgent, events: list[dict[str, Any]]) -> Action:
        """One step of ``a``'s seeking intention, with no model call: walk toward the cell where the
        person was last seen; once they are in sight, the purpose's action (invite, ask for help)
        and the intention ends (found); at that cell with nobody there, or the person dead, it ends
        (lost). Either way the agent's next decision chooses its next control. An approach (the
        murderer's) follows the person in sight until within ``kill_range`` and then attacks, once
        the cooldown allows (until then it stays next to them), as the host's intention invites:
        the purpose is carried out by the intention. Ended on sight or within reach, the murderer
        re-chose whom to seek or the victim walked on before the next choice, and nobody was ever
        attacked (docs/sim.md, "Measured: the mystery"). A zombie in sight interrupts any intention:
        the agent runs from it instead (interrupted)."""
        m = a.mind
        name, purpose = m.seek or "", m.seek_for

        def end(outcome: str, text: str, rethink: bool = True) -> None:
            a.ended.add((name, m.seek_since))
            m.seek, m.seek_for, m.rethink = None, "", rethink
            self.intentions[outcome] += 1
            events.append({"agent": a.name, "kind": f"seek_{outcome}", "text": text})

        if len(self._threats_near(a)):
            # A zombie in sight: the walk is dropped and the agent runs, as "run away from the zombies"
            # would; with intentions that walked on, 18 of 21 deaths with metacognition happened while
            # looking for someone (docs/sim.md, "Measured: the zombie"). No rethink: the agent's next
            # decision is an ordinary choice, and no seeking is offered while the threat is in sight.
            end("interrupted", f"{a.name} stopped looking for {name}: zombies in sight", rethink=False)
            return Action("flee", "run away from the zombies")  # carried out by _execute
        b = self.by_name.get(name)
        if b is None or not b.alive:
            end("lost", f"{a.name} stopped looking for {name}: {name} is dead")
            return Action("stay", "stay where I am")
        r = self.sc.perception_range
        d2 = (b.pos[0] - a.pos[0]) ** 2 + (b.pos[1] - a.pos[1]) ** 2
        if purpose == "approach" and d2 <= r * r:
            rules = self.sc.rules
            if d2 <= rules["kill_range"] ** 2:
                if self.step_no - self.last_kill_step >= rules["kill_cooldown"]:
                    end("found", f"{a.name} reached {name} at the {self.place_of(b.pos)}")
                    return Action("attack", f"attack {name}", name)
                return Action("seek", f"stay next to {name}", name, purpose)
            a.pos = mech.follow_step(self.world, a.pos, b.pos, self.sc.agent_speed)
            return Action("seek", f"follow {name}", name, purpose)
        if d2 <= r * r:
            end("found", f"{a.name} found {name} at the {self.place_of(b.pos)}")
            if purpose == "invite" and mech.PARTY in a.knows:
                return Action("invite", f"invite {name} to the Christmas party", name)
            return Action("ask", f"ask {name} for help", name)
        where, _, cell = a.last_seen.get(name, ("", 0, a.pos))
        if mech.distance(a.pos, cell) <= 1.5:
            a.last_seen.pop(name, None)
            end("lost", f"{a.name} did not find {name} at the {where}")
            return Action("stay", "stay where I am")
        a.pos = mech.follow_step(self.world, a.pos, cell, self.sc.agent_speed)
        return Action("seek", f"look for {name} at the {where}", name, purpose)

    def _share(self, a: GenerativeAgent, b: GenerativeAgent, events: list[dict[str, Any]]) -> None:
        """Two agents talked: each learns what the other knows (the party as an invitation,
        evidence as a told fact both remember)."""
        party = self.sc.rules["type"] == "party"
        if party and (mech.PARTY in a.knows) != (mech.PARTY in b.knows):
            host, guest = (a, b) if mech.PARTY in a.knows else (b, a)
            self._invite(host, guest, events)
        ka, kb = {f for f in a.knows if f != mech.PARTY}, {f for f in b.knows if f != mech.PARTY}
        place = self.place_of(a.pos)
        for t in mech.share(a.name, ka, b.name, kb):
            self.by_name[t.hearer].knows.add(t.fact)
            text = f"{t.teller} told {t.hearer} that {mech.fact_text(t.fact, self.sc.rules, '')}"
            for who in (t.teller, t.hearer):
                self.pending.append(PendingMemory(who, text, "conversation", place))
            events.append({"agent": t.teller, "kind": "tell", "text": text})

    def _invite(self, host: GenerativeAgent, guest: GenerativeAgent, events: list[dict[str, Any]]) -> None:
        ru = self.sc.rules
        if guest.name == ru["host"] or (guest.name in self.invited and mech.PARTY in guest.knows):
            return
        self.invited.add(guest.name)
        guest.knows.add("party")
        text = (f"{host.name} invited {guest.name} to the Christmas party at the {ru['location']} at "
                f"{self._clock_at(ru['start_step'])}")
        for who in (host, guest):
            self.pending.append(PendingMemory(who.name, text, "conversation", self.place_of(host.pos)))
        events.append({"agent": host.name, "kind": "invite", "text": text})

    def npc_phase(self, events: list[dict[str, Any]]) -> None:
        if self.horde is not None:
            xy = np.array([a.pos for a in self.agents], np.int32).reshape(-1, 2)
            alive = np.array([a.alive for a in self.agents], bool)
            for i in self.horde.step(xy, alive):
                a = self.agents[i]
                a.alive = False
                self.bodies.append((a.name, a.pos))
                witnesses = [b.name for b in self._agents_near(a, self.sc.perception_range)]
                self.events_prev.append((f"saw a zombie kill {a.name} at the {self.place_of(a.pos)}", witnesses))
                events.append({"agent": a.name, "kind": "death", "text": f"{a.name} was killed by a zombie at the {self.place_of(a.pos)}"})
        if self.sc.rules["type"] == "party":
            ru = self.sc.rules
            if ru["start_step"] <= self.step_no < ru["start_step"] + ru["duration_steps"]:
                for a in self.agents:
                    if a.alive and self.place_of(a.pos) == ru["location"] and a.name != ru["host"]:
                        self.party_attended.add(a.name)
                        if mech.PARTY in a.knows:
                            self.party_attended_informed.add(a.name)

    # ------------------------------------------------------------------ step / run
    def _remaining(self) -> float:
        return max(0.0, self._deadline - time.perf_counter())

    def step(self) -> StepTiming:
        """Advance one step; with ``step_budget`` every LLM wait of the step ends at one deadline."""
        t = StepTiming()
        t0, c0, e0 = time.perf_counter(), time.thread_time(), self.encoder.cpu_seconds
        self._deadline = t0 + (self.cfg.step_budget or 0.0)
        notices = self.perceive()
        t.perception = time.perf_counter() - t0
        memories = self.memory_phase(notices, t)
        cpu = time.thread_time() - c0 - (self.encoder.cpu_seconds - e0)
        t1 = time.perf_counter()
        decisions = self.think_phase(notices, memories)
        t.llm = time.perf_counter() - t1
        t2, c2 = time.perf_counter(), time.thread_time()
        self.finish_step(self.act(decisions))
        t.acting = time.perf_counter() - t2
        t.cpu_outside_llm = cpu + time.thread_time() - c2
        self.timings.append(t)
        return t

    def finish_step(self, events: list[dict[str, Any]]) -> None:
        """After the agents acted: the scenario's non-player rules, the step count, the frame, the log."""
        self.npc_phase(events)
        self.step_no += 1
        self._record_frame(events)
        for e in events:
            self.log.append({"step": self.step_no, **e})

    def run(self, steps: int | None = None, progress: Any = None) -> None:
        n = self.sc.steps if steps is None else steps
        for _ in range(n):
            if not any(a.alive for a in self.agents):
                break
            self.step()
            if progress is not None:
                progress(self)

    def _record_frame(self, events: list[dict[str, Any]]) -> None:
        self.frames.append({
            "step": self.step_no,
            "clock": self.clock(),
            "agents": [{"name": a.name, "x": a.pos[0], "y": a.pos[1], "alive": a.alive, "action": a.action.label,
                        "goal": a.mind.goal, "strategy": a.mind.strategy, "role": a.role} for a in self.agents],
            "zombies": self.horde.pos.tolist() if self.horde is not None else [],
            "bodies": [[n, p[0], p[1]] for n, p in self.bodies],
            "events": events,
        })

    # ------------------------------------------------------------------ results
    def metrics(self) -> dict[str, Any]:
        """Scenario metrics (survivors, attendance, culprit accusations) and run statistics."""
        rules = self.sc.rules
        alive = [a.name for a in self.agents if a.alive]
        meta = self.meta_counts()
        m: dict[str, Any] = {"steps": self.step_no, "agents": len(self.agents), "alive": len(alive),
                             "survivors": alive, "late_decisions": self.late, "plan_fallbacks": self.fallbacks,
                             "llm_budget_spent": self.budget_spent, "meta_cognize_runs": meta["meta_cognize"],
                             "memories": len(self.store), "metacognition": meta}
        if rules["type"] == "zombie":
            m["survival_rate"] = len(alive) / len(self.agents)
        if rules["type"] == "party":
            guests = [a.name for a in self.agents if a.name != rules["host"]]
            m["attendance"] = sorted(self.party_attended)
            m["attendance_rate"] = len(self.party_attended) / max(1, len(guests))
            m["attendance_informed"] = sorted(self.party_attended_informed)
            m["attendance_informed_rate"] = len(self.party_attended_informed) / max(1, len(guests))
            m["invited"] = sorted(self.invited)
        if rules["type"] == "mystery":
            m["murderer"] = rules["murderer"]
            m["kills"] = [list(k) for k in self.kills]
            m["accusations"] = [list(x) for x in self.accusations]
            m["detective_accused_culprit"] = any(w == rules["detective"] and t == rules["murderer"]
                                                 for _, w, t in self.accusations)
        tim = self.timings
        if tim:
            m["timing_ms"] = {k: round(1000 * float(np.mean([getattr(x, k) for x in tim])), 3)
                              for k in ("perception", "memory", "embedding", "importance_llm", "llm", "acting")}
            m["timing_ms"]["outside_llm"] = round(1000 * float(np.mean([x.outside_llm for x in tim])), 3)
            m["timing_ms"]["cpu_outside_llm"] = round(1000 * float(np.mean([x.cpu_outside_llm for x in tim])), 3)
        if self.llm is not None:
            m["llm_cost"] = self.llm.cost.as_dict()
        return m

    def meta_counts(self) -> dict[str, int]:
        """What the metacognitive decisions did: progress ratings made and skipped (nothing new
        since the last, or nothing a control could change), meta_cognize runs, how many of them
        changed the goal, the target (where the agent walks), the strategy, the person sought or
        the purpose, or nothing; the control options chosen by kind (keep, move, seek); and what the
        seeking intentions came to (found, lost, invitations made, facts passed on when found)."""
        ev = [e for a in self.agents for e in a.timeline]
        changed = [e["text"] for e in ev if e["kind"] == "meta_changed"]
        chosen = [e["text"].split(":", 1)[0] for e in ev if e["kind"] == "control"]
        return {"ratings": sum(e["kind"] == "progress" for e in ev),
                "ratings_skipped": sum(e["kind"] == "progress_skipped" for e in ev),
                "meta_cognize": len(changed),
                **{f"changed_{k}": sum(k in c.split(", ") for c in changed)
                   for k in ("goal", "target", "strategy", "seek", "purpose")},
                "changed_nothing": sum(c == "nothing" for c in changed),
                **{f"control_{k}": chosen.count(k) for k in ("keep", "move", "seek")},
                **{f"seek_{k}": self.intentions[k] for k in ("found", "lost", "interrupted", "invited", "facts_shared")}}

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.store.close()

    def save(self, extra: dict[str, Any] | None = None) -> str:
        """Write ``run.json`` (scenario, config, frames, timelines, log, metrics) atomically; returns its path."""
        doc = {
            "scenario": {"name": self.sc.name, "description": self.sc.description, "source": self.sc.source,
                         "seed": self.sc.seed, "rules": self.sc.rules, "seconds_per_step": self.sc.seconds_per_step,
                         "start_time": self.sc.start_time},
            "config": {"features": asdict(self.cfg.features), "agent": asdict(self.cfg.agent),
                       "step_budget": self.cfg.step_budget, "max_llm_calls": self.cfg.max_llm_calls,
                       "batched": self.cfg.batched},
            "world": {"name": self.world.name, "width": self.world.width, "height": self.world.height,
                      "walls": [[int(x), int(y)] for y, x in zip(*np.nonzero(~self.world.walkable))],
                      "locations": [{"name": l.name, "bounds": list(l.bounds)} for l in self.world.locations],
                      "objects": [{"name": o.name, "pos": list(o.pos)} for o in self.world.objects],
                      "zombie_free": self.sc.rules.get("zombie_free", [])},
            "agents": [{"name": a.name, "description": a.description, "personality": a.personality, "role": a.role,
                        "goal": a.mind.goal, "strategy": a.mind.strategy, "alive": a.alive,
                        "questions": a.mind.asked, "progress": a.mind.progress, "timeline": a.timeline}
                       for a in self.agents],
            "frames": self.frames,
            "log": self.log,
            "metrics": self.metrics(),
            **(extra or {}),
        }
        path = os.path.join(self.out_dir, "run.json")
        write_json(path, doc)
        return path


def write_json(path: str, doc: Any) -> None:
    """Atomic JSON write (temp file + fsync + os.replace: ``metacog_fast.runs.records``)."""
    from metacog_fast.runs.records import write_json_atomic

    write_json_atomic(path, doc, default=_json_default)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _dedupe(lines: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for x in lines:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out
