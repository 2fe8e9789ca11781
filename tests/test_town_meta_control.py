"""Metacognition through control (issue 53, item 2): ``meta_cognize`` chooses among control options
the simulation builds (keep the plan, go to a place, seek out a person for a purpose), and a seeking
intention is carried out by the simulation without model calls: walk to where the person was last
seen, act when they are in sight (invite, ask for help, follow), give up when they are not there.
Real world, scenarios and MiniLM encoder; the choice itself is the model's (tests/test_sim_agent.py),
here the decisions are given."""
from __future__ import annotations

import copy

import pytest

from metacog_fast.town import load_scenario
from metacog_fast.town import mechanics as mech
from metacog_fast.town.engine import SimConfig, Simulation
from metacog_fast.town.generative import Action, AgentConfig, Decision


@pytest.fixture(scope="module")
def encoder():
    from metacog_fast.scoring.encoder import MiniLMEncoder

    return MiniLMEncoder()


@pytest.fixture
def make(tmp_path, encoder):
    sims = []

    def build(name: str, n: int = 5, **kw) -> Simulation:
        sim = Simulation(load_scenario(name, n_agents=n, seed=0), None, encoder,
                         str(tmp_path / f"{name}{len(sims)}"), SimConfig(use_llm=False, **kw))
        sims.append(sim)
        return sim
    yield build
    for s in sims:
        s.close()


def seek(sim: Simulation, name: str, who: str, purpose: str) -> None:
    m = sim.by_name[name].mind
    m.seek, m.seek_for, m.seek_since = who, purpose, sim.step_no


def tick(sim: Simulation, decisions: dict[str, Decision] | None = None) -> list[dict]:
    """One step without a thinking phase: agents without a decision keep their plan."""
    sim.perceive()
    events = sim.act(decisions or {})
    sim.finish_step(events)
    return events


def pursue(sim: Simulation, name: str, ticks: int) -> list[dict]:
    """Tick until ``name``'s intention ends (or ``ticks`` pass); the events of those ticks."""
    events: list[dict] = []
    for _ in range(ticks):
        events += tick(sim)
        if sim.by_name[name].mind.seek is None:
            break
    return events


def far_apart(sim: Simulation, fixed: dict[str, str]) -> None:
    """Put the agents named in ``fixed`` in their places and everyone else in the Library."""
    for a in sim.agents:
        a.pos = sim.world.cells_of(fixed.get(a.name, "Library"))[0]
    for a in sim.agents:  # what everyone knows of the others' whereabouts now
        a.last_seen = {b.name: (sim.place_of(b.pos), 0, b.pos) for b in sim.agents if b is not a}


def test_controls_follow_the_scenario_and_the_role(make):
    party = make("party", max_seek=4)
    host = party.by_name["Hana"]
    far_apart(party, {"Hana": "Cafe", "Omar": "Shop", "Lena": "Park"})
    ctl = party.controls(host)
    assert ctl[0] == Action("keep", "keep going with my current plan")
    seeks = [c for c in ctl if c.kind == "seek"]
    assert len(seeks) == 4 and {c.purpose for c in seeks} == {"invite"}
    assert Action("seek", "invite Omar to the party", "Omar", "invite") in seeks
    omar_cell = party.by_name["Omar"].pos
    party.by_name["Omar"].pos = host.pos  # in sight: reached through the step's options, not sought
    assert not any(c.target == "Omar" for c in party.controls(host))
    party.by_name["Omar"].pos = omar_cell
    assert [c for c in ctl if c.kind == "move"] == []  # at the party's place, with a purpose: no other place
    omar = party.by_name["Omar"]
    ctl = party.controls(omar)  # knows no party: asks for help, or goes somewhere near
    assert {c.purpose for c in ctl if c.kind == "seek"} == {"talk"} and len([c for c in ctl if c.kind == "move"]) == 2
    omar.knows.add(mech.PARTY)
    ctl = party.controls(omar)
    assert [c for c in ctl if c.kind == "move"] == [Action("move", "go to the party at the Cafe", "Cafe")]

    mystery = make("mystery")
    assert {c.purpose for c in mystery.controls(mystery.by_name["Victor"]) if c.kind == "seek"} == {"approach"}
    assert {c.label.endswith("what they saw") for c in mystery.controls(mystery.by_name["Iris"]) if c.kind == "seek"} == {True}
    zombie = make("zombie", max_seek=1)
    a = zombie.agents[0]
    a.pos = zombie.world.cells_of("Park")[0]
    ctl = zombie.controls(a)
    assert Action("move", "go to the Bunker", "Bunker") in ctl and len([c for c in ctl if c.kind == "seek"]) == 1
    with pytest.raises(ValueError, match="max_seek"):
        SimConfig(max_seek=-1)


def test_perception_updates_where_others_were_last_seen(make):
    sim = make("party")
    far_apart(sim, {"Hana": "Cafe", "Omar": "Shop"})
    hana, omar = sim.by_name["Hana"], sim.by_name["Omar"]
    assert hana.last_seen["Omar"][0] == "Shop"
    omar.pos = (hana.pos[0] + 1, hana.pos[1]) if sim.world.walkable[hana.pos[1], hana.pos[0] + 1] else hana.pos
    sim.step_no = 3
    sim.perceive()
    assert hana.last_seen["Omar"] == (sim.place_of(omar.pos), 3, omar.pos)


def test_the_host_seeks_out_a_guest_and_invites_them_without_a_model(make):
    """Without the intention the host keeps to the Cafe and the guest never hears of the party;
    with it she walks to the Shop, invites Omar on sight, and the intention ends (found)."""
    sim = make("party")
    far_apart(sim, {"Hana": "Cafe", "Omar": "Shop"})
    for _ in range(12):
        tick(sim)
    assert "Omar" not in sim.invited

    sim = make("party")
    far_apart(sim, {"Hana": "Cafe", "Omar": "Shop"})
    seek(sim, "Hana", "Omar", "invite")
    events = pursue(sim, "Hana", 12)
    assert "Omar" in sim.invited and mech.PARTY in sim.by_name["Omar"].knows
    assert any(e["kind"] == "seek_found" for e in events) and any(e["kind"] == "invite" for e in events)
    assert sim.by_name["Hana"].action.kind == "invite"
    assert sim.by_name["Hana"].mind.rethink  # her next decision chooses the next control
    counts = sim.meta_counts()
    assert counts["seek_found"] == 1 and counts["seek_invited"] == 1 and counts["seek_lost"] == 0


def test_asking_for_help_passes_on_what_the_other_knows(make):
    sim = make("party")
    far_apart(sim, {"Hana": "Cafe", "Omar": "Shop"})
    seek(sim, "Omar", "Hana", "talk")
    pursue(sim, "Omar", 12)
    omar = sim.by_name["Omar"]
    assert mech.PARTY in omar.knows and omar.action == Action("ask", "ask Hana for help", "Hana")
    assert sim.intentions["facts_shared"] >= 1
    assert any(m.agent == "Hana" and "asked Hana for help" in m.text for m in sim.pending)


def test_an_intention_ends_lost_where_the_person_is_gone_and_is_not_revived(make):
    sim = make("party")
    far_apart(sim, {"Hana": "Cafe", "Omar": "Shop"})
    hana = sim.by_name["Hana"]
    stale = hana.last_seen["Omar"]
    sim.by_name["Omar"].pos = sim.world.cells_of("Library")[0]  # left the Shop; Hana still thinks he is there
    hana.last_seen["Omar"] = stale
    seek(sim, "Hana", "Omar", "invite")
    formed = hana.mind.seek_since
    late = Decision(action=Action("seek", "look for Omar", "Omar", "invite"), mind=copy.deepcopy(hana.mind))
    pursue(sim, "Hana", 15)
    assert sim.intentions["lost"] == 1 and "Omar" not in hana.last_seen and "Omar" not in sim.invited
    assert hana.action == Action("stay", "stay where I am")
    # a decision the game loop formed before the end arrives now: the ended intention stays ended
    assert late.mind.seek == "Omar" and late.mind.seek_since == formed
    tick(sim, {"Hana": late})
    assert hana.mind.seek is None


def test_the_murderer_approaches_and_attacks_once_the_cooldown_allows(make):
    """The approach follows the person in sight until within kill range, waits there for the cooldown
    and attacks, as the host's intention invites (ended on sight, the murderer re-chose whom to seek:
    0 kills in 10 runs; ended within reach for the next choice, the victim had walked on)."""
    sim = make("mystery")
    far_apart(sim, {"Victor": "Shop", "Gus": "Cafe"})
    sim.last_kill_step = 0  # the cooldown runs from step 0: Victor may not attack before kill_cooldown
    seek(sim, "Victor", "Gus", "approach")
    events = pursue(sim, "Victor", 40)
    victor, gus = sim.by_name["Victor"], sim.by_name["Gus"]
    assert sim.intentions["found"] == 1 and victor.mind.seek is None and victor.mind.rethink
    [(step, killer, victim)] = sim.kills
    assert not gus.alive and (killer, victim) == ("Victor", "Gus") and step >= sim.sc.rules["kill_cooldown"]
    assert [e["kind"] for e in events if e["agent"] == "Victor"][-2:] == ["seek_found", "attack"]
    assert any(e["text"] == "Victor reached Gus at the " + sim.place_of(gus.pos) for e in events)


def test_meta_mode_is_checked():
    with pytest.raises(ValueError, match="meta_mode"):
        AgentConfig(meta_mode="poetry")


def test_informed_attendance_counts_only_guests_who_knew(make, tmp_path):
    """Plain attendance counts any guest in the Cafe during the party; agents without planning
    wander in (memory-only runs: 10 of 32 guests present, 1 invitation). Informed attendance counts
    those who knew of it, in the run's metrics and recomputed from its record the same way."""
    import json

    from metacog_fast.town.evaluation import informed_attendance

    sim = make("party")
    ru = sim.sc.rules
    cafe = sim.world.cells_of(ru["location"])
    omar, lena = sim.by_name["Omar"], sim.by_name["Lena"]
    hana = sim.by_name["Hana"]
    tick(sim, {"Hana": Decision(action=Action("invite", "invite Omar to the Christmas party", "Omar"), mind=hana.mind)})
    while sim.step_no < ru["start_step"] + 2:
        if sim.step_no == ru["start_step"]:
            omar.pos, lena.pos = cafe[0], cafe[1]
        tick(sim)
    m = sim.metrics()
    assert set(m["attendance"]) >= {"Omar", "Lena"} and m["attendance_informed"] == ["Omar"]
    assert m["attendance_informed_rate"] == pytest.approx(1 / 4)
    doc = json.loads(open(sim.save()).read())
    assert informed_attendance(doc) == ["Omar"]
    with pytest.raises(ValueError, match="party run"):
        informed_attendance({**doc, "scenario": {**doc["scenario"], "rules": {"type": "zombie"}}})


def test_a_zombie_in_sight_interrupts_an_intention_and_no_seeking_is_offered(make):
    """With intentions that walked on whatever came into sight, 18 of 21 deaths with metacognition
    in the zombie ablation happened while "looking for" someone (docs/sim.md, "Measured: the
    zombie"). A zombie in sight now ends the intention (interrupted) and the agent runs, as the
    ordinary "run away from the zombies" would; while it is in sight, no seeking is offered."""
    import numpy as np

    sim = make("zombie")
    far_apart(sim, {"Ada": "Library", "Ben": "Park"})
    ada = sim.by_name["Ada"]
    assert any(c.kind == "seek" for c in sim.controls(ada))  # no zombie near: Ben may be sought
    walk = sim.world.walkable & sim.horde.free
    cells = [(x, y) for y, x in zip(*np.nonzero(walk))
             if 9 <= (x - ada.pos[0]) ** 2 + (y - ada.pos[1]) ** 2 <= 16]
    zombie = min(cells)
    sim.horde.pos = np.array([zombie], np.int32)
    before = (zombie[0] - ada.pos[0]) ** 2 + (zombie[1] - ada.pos[1]) ** 2
    controls = sim.controls(ada)
    assert [c.kind for c in controls if c.kind == "seek"] == [] and controls[0].kind == "keep"
    assert any(c.kind == "move" and c.target == "Bunker" for c in controls)
    seek(sim, "Ada", "Ben", "talk")
    events = tick(sim)
    assert ada.alive and ada.mind.seek is None and not ada.mind.rethink
    assert ada.action == Action("flee", "run away from the zombies")
    assert sim.intentions["interrupted"] == 1 and sim.meta_counts()["seek_interrupted"] == 1
    assert any(e["kind"] == "seek_interrupted" and e["agent"] == "Ada" for e in events)
    zx, zy = sim.horde.pos[0]
    assert (zx - ada.pos[0]) ** 2 + (zy - ada.pos[1]) ** 2 >= before - 1  # ran (the zombie took one step)


def test_meta_cognize_runs_count_control_mode_decisions(make):
    """``metrics()["meta_cognize_runs"]`` counted prose-mode decisions only (its "strategy" event):
    the zombie ablation's table said 0 where 133 control decisions were made."""
    sim = make("zombie")
    ada = sim.by_name["Ada"]
    d = Decision(action=Action("stay", "stay where I am"), mind=copy.deepcopy(ada.mind),
                 events=[("meta", "Where should I go for safety? -> the Bunker"), ("control", "move: go to the Bunker"),
                         ("meta_changed", "target")], metacognized=True)
    d.mind.target = "Bunker"
    tick(sim, {"Ada": d})
    assert sim.metrics()["meta_cognize_runs"] == 1 == sim.meta_counts()["meta_cognize"]
