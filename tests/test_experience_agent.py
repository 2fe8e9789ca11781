"""Plan-execute and reflect agents on real ALFWorld games: sub-task queue updates, the 20-action cap,
the retry without procedural memory, the reflect checklist, resume; plus one episode with the real
embedded LLM.

The policy in most tests is scripted (``ScriptedLLM``) so that control flow is checked exactly; the
environment is the real ALFWorld adapter.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from metacog_fast.experience import entries as en
from metacog_fast.experience import prompts as pr
from metacog_fast.experience import reflect as rf
from metacog_fast.experience.agent import PlanExecuteAgent
from metacog_fast.experience.config import ExperienceConfig
from metacog_fast.experience.memory import ExperienceMemory
from metacog_fast.experience.trajectory import Step, SubTask, SubTaskQueue, SubTaskResult

GAME = 13  # valid_seen pick_and_place_simple-Book-None-SideTable-329


@dataclass
class _Out:
    text: str


@dataclass
class _Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class ScriptedLLM:
    """A policy with fixed answers: ``plans`` for complete() calls in order (then ""), and
    ``act(prompt, options) -> option`` for action choices. Records every prompt and option list."""

    plans: list[str]
    act: object
    usage: _Usage = field(default_factory=_Usage)
    completes: list[str] = field(default_factory=list)
    choices: list[tuple[str, list[str]]] = field(default_factory=list)

    def complete(self, prompt, max_tokens=64, stop=None, **kw):
        self.usage.calls += 1
        self.usage.prompt_tokens += len(prompt) // 3
        self.completes.append(prompt)
        return [_Out(self.plans.pop(0) if self.plans else "")]

    def generate_choice(self, prompt, options, **kw):
        self.usage.calls += 1
        self.usage.prompt_tokens += len(prompt) // 3
        self.choices.append((prompt, list(options)))
        choice = self.act(prompt, options)
        assert choice in options
        return _Out(choice)


@pytest.fixture(scope="module")
def env():
    from metacog_fast.envs import make_env

    e = make_env("alfworld", split="valid_seen", game=GAME)
    yield e
    e.close()


def test_queue_updates():
    q = SubTaskQueue([SubTask(f"s{i}", f"g{i}") for i in range(5)], max_len=3)
    assert len(q) == 3
    assert q.pop().description == "s0" and q.done[0].description == "s0"
    assert q.replace([SubTask("s1", "g1"), SubTask("s2", "g2")]) is False  # same plan again: not a change
    assert q.replace([SubTask("x", "y")] * 5) is True and len(q) == 3 and q.replans == 2
    q.items.clear()
    with pytest.raises(IndexError):
        q.pop()
    with pytest.raises(ValueError, match="max_len"):
        SubTaskQueue([], 0)


def test_parse_plan():
    text = "1. find the book => you see a book\n- take it => you hold the book\nfind the book => dup\n\n3."
    items = pr.parse_plan(text, 4)
    assert [(s.description, s.goal) for s in items] == [("find the book", "you see a book"),
                                                          ("take it", "you hold the book")]
    assert pr.parse_plan("1.\n2. 2.\n", 4) == []


def test_plan_lines_copied_from_the_prompt_are_not_a_plan(env):
    from metacog_fast.experience.agent import _copied

    prompt = "Household task: put a book in sofa.\nLessons: When the same command is repeated: vary it"
    assert _copied(SubTask("When the same command is repeated", "x"), prompt, "put a book in sofa.")
    assert not _copied(SubTask("put a book in sofa", "x"), prompt, "put a book in sofa.")
    assert not _copied(SubTask("go to the sofa and look", "x"), prompt, "put a book in sofa.")
    assert [s.goal for s in pr.parse_plan("1. go to the desk\n", 4)] == ["go to the desk"]


def test_subtask_cap_queue_and_replanning(env):
    llm = ScriptedLLM(plans=["1. find the book => you see a book\n2. put it on the sidetable => book on sidetable",
                             "put it on the sidetable => book on sidetable\nlook again => you see a sidetable"],
                      act=lambda p, o: "look")
    agent = PlanExecuteAgent(llm, "alfworld", None, ExperienceConfig(action_shortlist=0, subtask_as_command=False, episode_action_cap=45, loop_breaking=False), count_tokens=pr.approx_tokens)
    rec = agent.run_task(env, game=GAME)
    subs = rec.subtasks
    assert subs[0]["description"] == "find the book"
    # 20-action cap: the scripted policy never finishes, so each sub-task stops at exactly 20 actions.
    assert subs[0]["capped"] and len(subs[0]["actions"]) == 20
    # without memory the failed sub-task still gets its second attempt (the same budget as with memory)
    assert subs[1]["description"] == "find the book" and subs[1]["retry"] is True
    assert subs[2]["description"] == "put it on the sidetable" and not subs[2]["retry"]
    assert rec.env_actions == 45  # the episode cap stops the third attempt after 5: 20 + 20 + 5
    assert [len(s["actions"]) for s in subs] == [20, 20, 5]
    assert rec.replans == 1 and rec.replans_changed == 1
    assert not rec.won and rec.subtasks_flagged == 0 and rec.retries == 1 and rec.verify_actions == 0
    assert all("no completion was claimed" in s["report"] for s in subs)


def test_retry_without_procedural_memory(env):
    mem = ExperienceMemory(ExperienceConfig())
    mem.add_sop(en.SOP("alfworld", "find book", ["task type: pick_and_place_simple"], ["go to bed <n>"]))

    def act(prompt, options):
        # first attempt: claim at once (no evidence, rejected); retry: one look, then claim again
        return "finish" if ("Procedure index" in prompt or "> look" in prompt) else "look"

    llm = ScriptedLLM(plans=["find the book => you see a book"], act=act)
    agent = PlanExecuteAgent(llm, "alfworld", mem, ExperienceConfig(action_shortlist=0, subtask_as_command=False, episode_action_cap=12, loop_breaking=False), count_tokens=pr.approx_tokens)
    steps_before = env.timings.steps
    rec = agent.run_task(env, game=GAME)
    first, retry = rec.subtasks[0], rec.subtasks[1]
    assert rec.retries >= 1
    # The first attempt auto-consulted the SOP and offered access_guide; the retry saw neither.
    p0, o0 = llm.choices[0]
    assert "Procedure index" in p0 and "access_guide find book" in o0 and "SOP [alfworld] find book" in p0
    retry_prompts = [(p, o) for p, o in llm.choices if "Procedure index" not in p]
    assert retry_prompts and all(not any(x.startswith("access_guide") for x in o) for _, o in retry_prompts)
    assert all("SOP [alfworld]" not in p for p, _ in retry_prompts)
    # Both attempts are recorded: the first used the SOP and was rejected, the retry did not use it.
    assert first["retry"] is False and first["sop_used"] == "alfworld/find book" and not first["flag"]
    assert first["actions"][0] == "access_guide find book"
    assert retry["retry"] is True and retry["sop_used"] is None and retry["description"] == "find the book"
    sop = mem.procedural["alfworld/find book"]
    assert sop.counts.failures >= 1 and sop.counts.uses >= 1
    # the verifier's look/inventory after each claim are counted apart from the agent's capped actions
    assert rec.verify_actions >= 1 and rec.env_actions <= 12
    assert env.timings.steps - steps_before == rec.env_actions + rec.verify_actions


def _first_go(options):
    return next(o for o in options if o.startswith("go to "))


def _res(desc, goal, steps, claimed=True, won=False):
    return SubTaskResult(SubTask(desc, goal), steps, claimed=claimed, capped=not claimed, won=won)


def test_reflect_rejects_claim_without_supporting_observation():
    r = _res("put the mug in the fridge", "mug is in the fridge",
             [Step("go to fridge 1", "Nothing happens."), Step("put mug 1 in/on fridge 1", "Nothing happens."),
              Step("finish", "", "finish")])
    verifies = []
    v = rf.check_subtask(r, last=False, verify=lambda c: verifies.append(c) or "You see a table 1.", env_name="alfworld")
    assert not v.flag and v.checks["claim"] and not v.checks["traced"]
    assert "claim not supported" in v.report and verifies == ["look", "inventory"]


def test_reflect_accepts_supported_and_verified_claim():
    r = _res("take the mug", "you hold the mug",
             [Step("go to countertop 1", "On the countertop 1, you see a mug 2."),
              Step("take mug 2 from countertop 1", "You pick up the mug 2 from the countertop 1."),
              Step("finish", "", "finish")])
    v = rf.check_subtask(r, last=False, verify=lambda c: "You are carrying: a mug 2." if c == "inventory" else
                         "You are facing the countertop 1.", env_name="alfworld")
    assert v.flag and all(v.checks.values())
    assert [s.action for s in r.steps if s.kind == "verify"] == ["look", "inventory"]


def test_reflect_active_verification_can_refute():
    # The trajectory mentions the mug, but look/inventory after the claim do not show it any more.
    r = _res("take the mug", "you hold the mug",
             [Step("take mug 2 from countertop 1", "You pick up the mug 2 from the countertop 1."),
              Step("put mug 2 in/on sinkbasin 1", "You put the mug 2 in/on the sinkbasin 1."),
              Step("finish", "", "finish")])
    v = rf.check_subtask(r, last=False, verify=lambda c: "You are not carrying anything." if c == "inventory"
                         else "You see a sinkbasin 1.", env_name="alfworld")
    assert v.checks["traced"] and not v.checks["verified"] and not v.flag


def test_reflect_last_subtask_needs_the_win():
    steps = [Step("take book 1 from bed 1", "You pick up the book 1 from the bed 1."), Step("finish", "", "finish")]
    v = rf.check_subtask(_res("take book", "book", list(steps)), last=True, verify=lambda c: "book 1", env_name="alfworld")
    assert not v.flag and "not won" in v.report
    v = rf.check_subtask(_res("take book", "book", list(steps), won=True), last=True, verify=None, env_name="alfworld")
    assert v.flag
    v = rf.check_subtask(_res("take book", "book", list(steps[:1]), claimed=False), last=False, verify=None,
                         env_name="alfworld")
    assert not v.flag and "no completion" in v.report


def test_distillation_after_task_writes_strategic_and_tool_memory(env):
    mem = ExperienceMemory(ExperienceConfig())
    llm = ScriptedLLM(plans=["find the book => you see a book", "", "Open containers before taking from them."],
                      act=lambda p, o: _first_go(o) if "> go to" not in p else "look")
    agent = PlanExecuteAgent(llm, "alfworld", mem, ExperienceConfig(action_shortlist=0, subtask_as_command=False, episode_action_cap=6, subtask_action_cap=3, loop_breaking=False),
                             run_id="r1", model="scripted", count_tokens=pr.approx_tokens)
    rec = agent.run_task(env, game=GAME)
    assert rec.memory_sizes["tool_dynamic"] >= 1
    target = rec.subtasks[0]["actions"][0]
    assert target.startswith("go to ")
    assert f"worked before: '{target.rstrip('0123456789')}<n>'" in mem.dynamic_instruction("alfworld", "go to")
    assert any(s.provenance.run == "r1" and s.provenance.model == "scripted" for s in mem.strategic) or \
        mem.strategic == []
    # The dynamic instruction is shown with the observation after the tool is used, next task.
    llm2 = ScriptedLLM(plans=["go to the bed => you see the bed"], act=lambda p, o: _first_go(o))
    PlanExecuteAgent(llm2, "alfworld", mem, ExperienceConfig(action_shortlist=0, subtask_as_command=False, episode_action_cap=2, subtask_action_cap=2),
                     count_tokens=pr.approx_tokens).run_task(env, game=GAME)
    assert "(tip: worked before: 'go to " in llm2.choices[1][0]


def test_continuous_learning_resume(tmp_path):
    from metacog_fast.experience import protocols as pt

    cfg = pt.ProtocolConfig(games=[str(GAME)], iterations=2, out=str(tmp_path / "run"))
    exp = ExperienceConfig(action_shortlist=0, subtask_as_command=False, episode_action_cap=3, subtask_action_cap=3, loop_breaking=False)
    llm = ScriptedLLM(plans=[], act=lambda p, o: "look")
    m = pt.continuous_learning(cfg, exp, llm=llm, log=lambda s: None)
    assert [(r["condition"], r["iteration"]) for r in m["rows"]] == [("baseline", 0), ("memory", 1), ("memory", 2)]
    n_calls = llm.usage.calls
    m2 = pt.continuous_learning(cfg, exp, llm=llm, log=lambda s: None)  # resumed: nothing left to run
    assert llm.usage.calls == n_calls and m2["rows"] == m["rows"]
    assert (tmp_path / "run" / "learning_curve.png").stat().st_size > 1000
    recs = [json.loads((tmp_path / "run" / "episodes" / k / f"{GAME}.json").read_text())
            for k in ("baseline/0", "memory/1", "memory/2")]
    assert [r["key"] for r in recs] == [f"baseline/0/{GAME}", f"memory/1/{GAME}", f"memory/2/{GAME}"]
    assert "memory_after" not in recs[0] and recs[2]["memory_after"]["format"] == "metacog-experience-memory"
    with pytest.raises(ValueError, match="different configuration"):  # a result-changing field differs
        pt.continuous_learning(pt.ProtocolConfig(games=[str(GAME)], iterations=2, out=str(tmp_path / "run")),
                               ExperienceConfig(episode_action_cap=4), llm=llm, log=lambda s: None)
    assert json.loads((tmp_path / "run" / "memory.json").read_text())["format"] == "metacog-experience-memory"


def test_one_episode_with_the_embedded_llm(env):
    from metacog_fast.llm import open_llm

    llm = open_llm(n_threads=1)
    mem = ExperienceMemory(ExperienceConfig())
    agent = PlanExecuteAgent(llm, "alfworld", mem, ExperienceConfig(episode_action_cap=4, subtask_action_cap=2,
                                                                    plan_max_tokens=32, distill_max_tokens=16))
    rec = agent.run_task(env, game=GAME)
    assert rec.env_actions <= 4  # the cap bounds the agent's actions; verifier reads are counted apart
    assert rec.verify_actions <= 2 * rec.subtasks_total
    assert rec.tokens > 0 and rec.llm_calls >= 3 and rec.subtasks_total >= 1
    assert all(len([a for a in s["actions"]]) <= 2 + 2 for s in rec.subtasks)
    llm.close()


def test_transfer_uses_frozen_memory_written_by_another_model(tmp_path):
    from metacog_fast.experience import protocols as pt

    mem = ExperienceMemory()
    mem.ensure_tools("alfworld")
    mem.add_sop(en.SOP("alfworld", "put book on sidetable", [], ["go to sidetable <n>"],
                       provenance=en.Provenance(model="http://other-server/v1")))
    src = tmp_path / "mem.json"
    mem.export_json(src)
    before = json.loads(src.read_text())
    cfg = pt.ProtocolConfig(games=[str(GAME)], out=str(tmp_path / "t"), memory_in=str(src))
    llm = ScriptedLLM(plans=[], act=lambda p, o: "finish")
    m = pt.transfer(cfg, ExperienceConfig(action_shortlist=0, subtask_as_command=False, episode_action_cap=3, subtask_action_cap=2), llm=llm, log=lambda s: None)
    assert [(r["condition"], r["iteration"]) for r in m["rows"]] == [("baseline", 0), ("frozen", 1)]
    after = json.loads((tmp_path / "t" / "memory.json").read_text())
    assert after["procedural"] == before["procedural"] and after["strategic"] == before["strategic"]  # frozen
    assert any("SOP [alfworld] put book on sidetable" in p for p, _ in llm.choices)  # it was used
    with pytest.raises(ValueError, match="memory_in"):
        pt.transfer(pt.ProtocolConfig(out=str(tmp_path / "u")), llm=llm)
