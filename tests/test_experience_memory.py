"""Experience memory: SOP distillation and dedup, strategic merge and bound, demotion/retirement,
JSON export/import, persistence in the memory store, prompt assembly within a token budget."""
from __future__ import annotations

import json

import numpy as np
import pytest

from metacog_fast.experience import entries as en
from metacog_fast.experience import prompts as pr
from metacog_fast.experience import reflect as rf
from metacog_fast.experience.config import ExperienceConfig
from metacog_fast.experience.embed import hashing_embedder
from metacog_fast.experience.memory import ExperienceMemory, open_store
from metacog_fast.experience.trajectory import Step, SubTask, SubTaskResult


def _success(desc: str, actions: list[tuple[str, str]]) -> SubTaskResult:
    return SubTaskResult(SubTask(desc, desc), [Step(a, o) for a, o in actions], claimed=True, capped=False,
                         won=False, flag=True)


TRAJ = [("go to countertop 1", "On the countertop 1, you see a apple 1."),
        ("take apple 2 from drawer 3", "Nothing happens."),
        ("take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1."),
        ("go to microwave 1", "The microwave 1 is closed."),
        ("heat apple 1 with microwave 1", "You heat the apple 1 using the microwave 1.")]


def test_sop_distillation_templates_steps_and_notes_failures():
    sop = rf.distill_sop("alfworld", "pick_heat_then_place", _success("Heat the apple", TRAJ), en.Provenance("t"))
    assert sop is not None
    assert sop.skill == "heat apple"
    assert sop.steps == ["go to countertop <n>", "take apple <n> from countertop <n>", "go to microwave <n>",
                         "heat apple <n> with microwave <n>"]
    assert sop.notes == ["'take apple <n> from drawer <n>' had no effect at that point"]
    assert sop.counts.successes == 1 and sop.preconditions == ["task type: pick_heat_then_place"]
    # Only failing actions: nothing to distil.
    assert rf.distill_sop("alfworld", "", _success("x", [("open safe 1", "Nothing happens.")]), en.Provenance()) is None


def test_sop_dedup_merges_same_and_near_duplicate_skills():
    mem = ExperienceMemory(ExperienceConfig(dedup_threshold=0.9))
    a = rf.distill_sop("alfworld", "", _success("heat the apple", TRAJ), en.Provenance("t1"))
    b = rf.distill_sop("alfworld", "", _success("heat the apple", TRAJ[2:]), en.Provenance("t2"))
    c = rf.distill_sop("alfworld", "", _success("Heat an apple", TRAJ), en.Provenance("t3"))
    mem.add_sop(a)
    mem.add_sop(b)
    mem.add_sop(c)
    assert len(mem.procedural) == 1
    only = next(iter(mem.procedural.values()))
    assert only.counts.successes == 3 and only.counts.uses == 3
    assert only.steps == b.steps  # the shorter successful procedure wins
    other = rf.distill_sop("alfworld", "", _success("put a mug in the cabinet", TRAJ[:1]), en.Provenance())
    mem.add_sop(other)
    assert len(mem.procedural) == 2
    # Same skill in another environment is a different entry.
    mem.add_sop(en.SOP("scienceworld", "heat apple", [], ["x"]))
    assert len(mem.procedural) == 3


def test_strategic_merge_and_bound():
    mem = ExperienceMemory(ExperienceConfig(max_strategic=3, dedup_threshold=0.9))
    mem.add_strategic(en.StrategicEntry("the same command is repeated ('look')", "try a new place"))
    mem.add_strategic(en.StrategicEntry("the same command is repeated ('look')", "open containers"))
    assert len(mem.strategic) == 1 and mem.strategic[0].strategy == "open containers"
    for i, d in enumerate(["many commands have no effect", "a sub-task uses all its actions",
                           "a claim came before the evidence", "the task ends without success"]):
        e = en.StrategicEntry(d, f"rule {i}")
        e.counts = en.Counts(uses=4, successes=i, failures=4 - i)
        mem.add_strategic(e)
    assert len(mem.strategic) == 3
    kept = {s.dilemma for s in mem.strategic}
    assert "the task ends without success" in kept and "many commands have no effect" not in kept


def test_demotion_then_retirement_then_revival():
    cfg = ExperienceConfig(demote_after_failures=2, retire_after_failures=4, retire_failure_rate=0.75)
    mem = ExperienceMemory(cfg)
    sop = mem.add_sop(en.SOP("alfworld", "cool mug", [], ["go to fridge <n>"]))
    assert mem.record_sop_outcome(sop, False) == "active"
    assert mem.record_sop_outcome(sop, False) == "demoted"
    assert [p.status for p in mem.active_sops("alfworld")] == ["demoted"]
    assert mem.record_sop_outcome(sop, False) == "demoted"
    assert mem.record_sop_outcome(sop, False) == "retired"
    assert mem.active_sops("alfworld") == [] and mem.find_sop("alfworld", "cool mug") is None
    assert mem.sizes()["procedural_retired"] == 1
    mem.add_sop(en.SOP("alfworld", "cool mug", [], ["take mug <n> from table <n>", "cool mug <n> with fridge <n>"],
                       counts=en.Counts(1, 1, 0)))
    assert sop.status == "active" and sop.steps[0].startswith("take mug")


def test_demoted_sop_recovers_with_successes():
    mem = ExperienceMemory(ExperienceConfig(demote_after_failures=2))
    sop = mem.add_sop(en.SOP("alfworld", "clean plate", [], ["go to sinkbasin <n>"]))
    mem.record_sop_outcome(sop, False)
    mem.record_sop_outcome(sop, False)
    assert sop.status == "demoted"
    mem.record_sop_outcome(sop, True)
    assert sop.status == "demoted"
    mem.record_sop_outcome(sop, True)
    assert sop.status == "active"


def _filled() -> ExperienceMemory:
    mem = ExperienceMemory()
    mem.ensure_tools("alfworld")
    mem.add_strategic(en.StrategicEntry("many commands have no effect", "check the admissible list",
                                        en.Provenance("task a", "run1", "2026-01-01", "llama-cpp://"), en.Counts(2, 1, 1)))
    mem.add_sop(rf.distill_sop("alfworld", "pick_heat", _success("heat apple", TRAJ), en.Provenance("task a")))
    mem.set_dynamic("alfworld", "heat", "worked before: 'heat apple <n> with microwave <n>'", en.Provenance("task a"))
    return mem


def test_json_export_import_roundtrip_and_errors(tmp_path):
    mem = _filled()
    path = tmp_path / "m.json"
    mem.export_json(path)
    data = json.loads(path.read_text())
    assert data["strategic"][0]["provenance"]["run"] == "run1" and data["strategic"][0]["counts"]["uses"] == 2
    back = ExperienceMemory()
    back.load_json(path, merge=False)
    assert back.to_json()["procedural"] == data["procedural"] and back.to_json()["tool"] == data["tool"]
    assert back.dynamic_instruction("alfworld", "heat").startswith("worked before")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        ExperienceMemory().load_json(bad)
    with pytest.raises(ValueError, match="format"):
        ExperienceMemory().load_json({"strategic": []})
    d = mem.to_json()
    d["procedural"][0]["status"] = "sleeping"
    with pytest.raises(ValueError, match="status"):
        ExperienceMemory().load_json(d)
    d = mem.to_json()
    d["strategic"][0]["counts"]["uses"] = -1
    with pytest.raises(ValueError, match="counts.uses"):
        ExperienceMemory().load_json(d)
    with pytest.raises(FileNotFoundError, match="memory file not found"):
        ExperienceMemory().load_json(tmp_path / "missing.json")


def test_memory_store_persistence(tmp_path):
    mem = _filled()
    store = open_store(tmp_path / "exp.db")
    n = mem.save(store)
    assert n == len(mem.strategic) + len(mem.procedural) + len(mem.tool)
    store.close()
    store = open_store(tmp_path / "exp.db")
    back = ExperienceMemory.load(store)
    assert back.to_json()["strategic"] == mem.to_json()["strategic"]
    assert back.to_json()["procedural"] == mem.to_json()["procedural"]
    assert len(back.tool) == len(mem.tool)
    # Saving again replaces, it does not duplicate.
    assert back.save(store) == n and len(store) == n
    store.close()


def test_hashing_embedder_ignores_object_numbers():
    e = hashing_embedder(["take apple 1 from fridge 2", "take apple 3 from fridge 1", "open the drawer"])
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert e[0] @ e[1] > 0.999 and e[0] @ e[2] < 0.5


@pytest.fixture(scope="module")
def smollm_counter():
    from metacog_fast.llm import open_llm

    llm = open_llm(n_threads=1)
    yield pr.llm_token_counter(llm)
    llm.close()


def test_prompt_assembly_within_token_budget(smollm_counter):
    count = smollm_counter
    assert count("go to fridge 1") < pr.approx_tokens("go to fridge 1") + 3  # a real tokenizer, not the estimate
    steps = [Step(f"go to cabinet {i}", f"The cabinet {i} is closed. You see nothing special here at all.")
             for i in range(80)]
    head = [pr.SYSTEM, "Task: put a clean mug in the coffeemachine.", "Current sub-task: find a mug"]
    optional = [pr.strategic_section([f"When problem {i}: rule {i}" for i in range(8)]),
                pr.index_section(["heat apple", "cool mug"])]
    for budget in (200, 400, 900):
        p = pr.assemble(head, optional, steps, "> ", budget, count)
        assert count(p) <= budget
        assert p.endswith("> ") and "Current sub-task: find a mug" in p
        assert "go to cabinet 79" in p  # newest step kept
        assert "go to cabinet 0\n" not in p and "earlier steps omitted" in p
    roomy = pr.assemble(head, optional, steps[:3], "> ", 4000, count)
    assert "Procedure index" in roomy and "go to cabinet 0" in roomy
    tight = pr.assemble(head, optional, steps, "> ", 160, count)
    assert "Lessons" not in tight and count(tight) <= 160  # memories dropped before the last steps
    with pytest.raises(ValueError, match="budget"):
        pr.assemble(head, optional, steps, "> ", 20, count)
    # the lessons go before the task and sub-task, never right before the first "> "
    sys_head, focus = head[:1], head[1:]
    for budget in (400, 4000):
        p = pr.assemble(sys_head, optional, steps[:3], "> ", budget, count, focus)
        assert count(p) <= budget and "Lessons from earlier tasks" in p
        assert p.index("Lessons from earlier tasks") < p.index("Task: put a clean mug") < p.index("> go to cabinet")
        assert p.index("Procedure index") < p.index("Current sub-task: find a mug")
    with pytest.raises(ValueError, match="budget"):
        pr.assemble(sys_head, optional, steps, "> ", 25, count, focus)
