"""Grid world, perception, movement, zombie rules, short-term memory expiry, batched vs
unbatched step, meta memories through retrieval, the replay viewer (no LLM here)."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess

import numpy as np
import pytest

from metacog_fast.town.generative import AgentConfig, Features
from metacog_fast.town.generative.memory import PendingMemory
from metacog_fast.town import load_scenario, load_world, visible_pairs
from metacog_fast.town.engine import SimConfig, Simulation
from metacog_fast.town.rules import ZombieHorde, ZombieRules
from metacog_fast.town.viewer import render_html, write_viewer


@pytest.fixture(scope="module")
def encoder():
    from metacog_fast.scoring.encoder import MiniLMEncoder

    return MiniLMEncoder()


def _sim(tmp_path, encoder, scenario="zombie", n=3, seed=0, **cfg):
    sc = load_scenario(scenario, n_agents=n, seed=seed)
    return Simulation(sc, None, encoder, str(tmp_path), SimConfig(use_llm=False, **cfg))


def test_visible_pairs_matches_brute_force():
    rng = np.random.default_rng(0)
    for n, m in ((1, 1), (3, 63), (63, 3), (257, 5)):
        a, b = rng.integers(0, 40, (n, 2)), rng.integers(0, 40, (m, 2))
        got = visible_pairs(a, b, 5.5)
        want = np.array([[((a[i] - b[j]) ** 2).sum() <= 5.5 ** 2 for j in range(m)] for i in range(n)])
        assert got.shape == (n, m) and (got == want).all()


def test_pathing_reaches_every_location():
    w = load_world("town")
    start = (0, 0)
    for loc in w.locations:
        pos = start
        for _ in range(200):
            pos = w.step_towards(pos, w.location_field(loc.name), 2)
        assert w.location_at(*pos) == loc.name
        assert w.walkable[pos[1], pos[0]]


def test_perception_within_range(tmp_path, encoder):
    sim = _sim(tmp_path, encoder, n=3)
    a, b, c = sim.agents
    a.pos, b.pos, c.pos = (1, 8), (4, 8), (20, 20)  # b 3 cells from a, c far away
    sim.horde.pos = np.array([[1, 12]], np.int32)  # 4 cells from a
    notices = sim.perceive()
    assert any(line.startswith(f"{b.name} is at") for line in notices[a.name])
    assert not any(line.startswith(f"{c.name} is at") for line in notices[a.name])
    assert any("zombie" in line for line in notices[a.name])
    assert not any("zombie" in line for line in notices[c.name])
    # new notices become pending observations of their agent
    assert any(m.agent == a.name and b.name in m.text and m.kind == "observation" for m in sim.pending)
    sim.close()


def test_zombies_chase_kill_and_respect_safe_areas():
    w = load_world("town")
    horde = ZombieHorde(w, ZombieRules(count=1, sight=6, kill_range=1, speed=1), ["Bunker"], ["Park"],
                        random.Random(0))
    horde.pos = np.array([[5, 12]], np.int32)
    agents = np.array([[9, 12], [30, 20]], np.int32)
    alive = np.array([True, True])
    killed = horde.step(agents, alive)
    assert horde.pos.tolist() == [[6, 12]] and killed == []  # stepped toward the seen agent
    for _ in range(3):
        killed = horde.step(agents, alive)
        if killed:
            break
    assert killed == [0]
    # an agent inside the zombie-free Bunker is neither chased into it nor killed
    horde.pos = np.array([[32, 6]], np.int32)  # just outside the Bunker door
    inside = np.array([[32, 4]], np.int32)
    for _ in range(10):
        assert horde.step(inside, np.array([True])) == []
        assert not horde.in_safe(horde.pos).any()


def test_zombie_wanders_when_nobody_is_seen():
    w = load_world("town")
    horde = ZombieHorde(w, ZombieRules(count=4, sight=3), [], [], random.Random(1))
    before = horde.pos.copy()
    horde.step(np.array([[0, 0]], np.int32), np.array([False]))
    moved = np.abs(horde.pos - before).sum(1)
    assert (moved <= 1).all() and moved.sum() > 0
    assert all(w.walkable[y, x] for x, y in horde.pos)


def test_short_term_memory_expiry_controls_observations(tmp_path, encoder):
    sim = _sim(tmp_path, encoder, n=2)  # 10 s per step; short-term memory lives 30 s
    a, b = sim.agents
    sim.horde.pos = np.zeros((0, 2), np.int32)
    a.pos, b.pos = (1, 8), (3, 8)
    seen = []
    for _ in range(5):
        sim.step()
        seen.append(sum(1 for e in sim.memory.texts.values() if e == f"{a.name} noticed: {b.name} is at the street"))
    # stored at step 0; repeated notices stay in short-term memory (not stored again) until it expires
    # after 30 s = 3 steps, then the same notice is a new observation again
    assert seen[0] == 1 and seen[1] == 1 and seen[2] == 1 and seen[3] == 2
    items = sim.memory.short_term.items(a.name, sim.now())
    assert len(items) <= 7 and all(sim.now() - it.time < 30 for it in items)
    sim.close()


def test_batched_and_unbatched_steps_agree(tmp_path, encoder):
    runs = []
    for batched in (True, False):
        sim = _sim(tmp_path / str(batched), encoder, n=4, seed=2, batched=batched)
        for i, a in enumerate(sim.agents):
            a.mind.target = sim.places[i]
        sim.run(6)
        runs.append((json.dumps(sim.frames), sorted(sim.memory.texts.values())))
        sim.close()
    assert runs[0] == runs[1]


def test_meta_memories_come_back_through_retrieval(tmp_path, encoder):
    sim = _sim(tmp_path, encoder, n=2)
    a = sim.agents[0].name
    filler = [PendingMemory(a, f"{a} noticed: a {x} is here", "observation", "Park", 3)
              for x in ("bench", "tree", "lamp", "bin", "pond", "dog", "bird", "kiosk")]
    meta = PendingMemory(a, f"{a} asked themself: Where should I go for safety? Answer: the Bunker keeps zombies out",
                         "meta", "Park", 8)
    sim.memory.commit(filler + [meta], 0.0)
    # the next step's situation retrieval brings the meta memory back for a related situation
    q = sim.memory.encoder.encode(["where is it safe from the zombies?"])
    got = sim.memory.retrieve_kinds(a, q, 3, 10.0)[0]
    assert ("meta", meta.text) in got
    assert all(sim.memory.kinds[i] in ("observation", "meta") for i in sim.memory.kinds)
    sim.close()


def test_memory_off_keeps_only_short_term(tmp_path, encoder):
    sim = _sim(tmp_path, encoder, n=2, features=Features(memory=False, reflection=False, planning=False,
                                                          metacognition=False))
    sim.run(2)
    assert len(sim.store) == 0 and len(sim.memory.short_term) > 0
    sim.close()


def test_viewer_is_one_self_contained_file(tmp_path, encoder):
    sim = _sim(tmp_path, encoder, n=3)
    for i, a in enumerate(sim.agents):
        a.mind.target = sim.places[i + 3]
    sim.agents[0].timeline.append({"step": 0, "kind": "meta", "text": "Where should I go for safety? -> Bunker"})
    sim.run(4)
    path = sim.save()
    sim.close()
    with open(path) as f:
        run = json.load(f)
    out = write_viewer(run, str(tmp_path / "viewer.html"))
    page = open(out).read()
    assert "<script src" not in page and "http://" not in page and "https://" not in page and "<link" not in page
    start = page.index('<script id="run-data" type="application/json">') + len('<script id="run-data" type="application/json">')
    data = json.loads(page[start: page.index("</script>", start)])
    assert len(data["frames"]) == 5 and data["frames"][0]["agents"][0]["name"] == sim.agents[0].name
    assert data["agents"][0]["timeline"][0]["kind"] == "meta"
    with pytest.raises(ValueError, match="frames"):
        render_html({"world": {}, "agents": []})


@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="headless Chromium not installed at /usr/bin/chromium")
def test_viewer_screenshot_in_headless_chromium(tmp_path, encoder):
    sim = _sim(tmp_path, encoder, n=3)
    sim.run(3)
    run = json.load(open(sim.save()))
    sim.close()
    page = write_viewer(run, str(tmp_path / "viewer.html"))
    shot = tmp_path / "shot.png"
    subprocess.run(["/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1200,800", f"file://{page}"], check=True, timeout=120, capture_output=True)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_second_simulation_in_a_running_folder_is_refused_and_deletes_nothing(tmp_path, encoder):
    from metacog_fast.memory import StoreLockedError

    first = _sim(tmp_path, encoder)
    first.step()
    n = len(first.store)
    assert n > 0
    with pytest.raises(StoreLockedError, match="already open"):
        _sim(tmp_path, encoder)
    assert len(first.store) == n and os.path.getsize(tmp_path / "memory.sqlite") > 0
    first.close()
    second = _sim(tmp_path, encoder)  # a finished run's folder is reused from an empty memory
    assert len(second.store) == 0
    second.close()
