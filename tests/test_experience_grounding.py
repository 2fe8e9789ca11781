"""Action grounding (choice / embed / choose) and loop breaking of the plan-execute agent, on the
real ALFWorld env with scripted policies (so that the options offered and the commands sent are
checked exactly)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from metacog_fast.experience import prompts as pr
from metacog_fast.experience.agent import PlanExecuteAgent
from metacog_fast.experience.config import ExperienceConfig
from metacog_fast.experience.embed import hashing_embedder
from metacog_fast.experience.grounding import LoopBreaker, subtask_commands

GAME = 13  # valid_seen pick_and_place_simple-Book-None-SideTable-329: a book 1 and a book 2 lie on bed 1


@dataclass
class _Out:
    text: str


@dataclass
class _Choice:
    index: int
    logprobs: list


@dataclass
class _Usage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Policy:
    """Scripted LLM: plan calls answer ``plan``; action turns are answered by ``act(prompt, options)``
    (constrained choice) or ``say(prompt)`` (free text, prompts ending in '>')."""

    plan: str = "take the book => you hold the book"
    act: object = None
    say: object = None
    pick: object = None
    usage: _Usage = field(default_factory=_Usage)
    offered: list = field(default_factory=list)
    said: list = field(default_factory=list)
    prompts: list = field(default_factory=list)

    def complete(self, prompt, max_tokens=64, stop=None, **kw):
        self.usage.calls += 1
        self.prompts.append(prompt)
        if prompt.endswith(">") and self.say is not None:
            t = self.say(prompt)
            self.said.append(t)
            return [_Out(t)]
        return [_Out(self.plan if "Sub-tasks:" in prompt and "Household task" in prompt.split("\n")[0] else "")]

    def generate_choice(self, prompt, options, **kw):
        self.usage.calls += 1
        self.prompts.append(prompt)
        self.offered.append(list(options))
        c = self.act(prompt, options)
        assert c in options
        return _Out(c)

    def choose(self, prompt, options):
        self.usage.calls += 1
        return _Choice(self.pick([o.strip() for o in options]), [0.0] * len(options))


class HashEncoder:
    """Stands in for MiniLM in the embed mapping (``encode(texts) -> [N, 384]``); digits kept."""

    def encode(self, texts):
        return hashing_embedder([t.replace("1", " one").replace("2", " two") for t in texts])


@pytest.fixture(scope="module")
def env():
    from metacog_fast.envs import make_env

    e = make_env("alfworld", split="valid_seen", game=GAME)
    yield e
    e.close()


def test_loop_breaker_rules():
    lb = LoopBreaker("alfworld")
    opts = ["go to bed 1", "inventory", "look", "take book 1 from bed 1"]
    lb.record("inventory", "You are not carrying anything.")
    assert lb.allowed(opts) == opts  # run once: nothing repeated yet
    lb.record("inventory", "You are not carrying anything.")
    assert "inventory" not in lb.allowed(opts)  # repeated with an unchanged observation: hidden
    lb.record("go to bed 1", "You arrive at bed 1. On the bed 1, you see a book 1.")
    assert "inventory" not in lb.allowed(opts)  # a new observation from a move does not re-offer it
    lb.record("go to bed 1", "Nothing happens.")
    lb.record("go to bed 1", "Nothing happens.")
    assert lb.allowed(opts) == ["look", "take book 1 from bed 1"]
    lb.record("take book 1 from bed 1", "You pick up the book 1 from the bed 1.")
    assert lb.allowed(opts) == opts  # the world changed: everything is offered again
    assert lb.hidden_turns == 3
    lb2 = LoopBreaker("alfworld")
    for _ in range(2):
        lb2.record("look", "You are in the middle of a room.")
    assert lb2.allowed(["look"]) == ["look"]  # all hidden -> all offered


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="action_grounding"):
        ExperienceConfig(action_grounding="nearest")
    with pytest.raises(ValueError, match="subtask_action_cap"):
        ExperienceConfig(subtask_action_cap=0)
    assert ExperienceConfig().loop_breaking is True


def _always_inventory(prompt, options):
    return "inventory" if "inventory" in options else next(o for o in options if o != "finish")


@pytest.mark.parametrize("breaking", [True, False])
def test_inventory_loop_is_broken_only_with_the_option(env, breaking):
    llm = Policy(act=_always_inventory)
    cfg = ExperienceConfig(episode_action_cap=8, loop_breaking=breaking, action_shortlist=0, subtask_as_command=False)
    rec = PlanExecuteAgent(llm, "alfworld", None, cfg, count_tokens=pr.approx_tokens).run_task(env, game=GAME)
    acts = rec.subtasks[0]["actions"]
    if breaking:
        # inventory twice (the second repeats the observation), then it is no longer offered
        assert acts[:2] == ["inventory", "inventory"] and "inventory" not in acts[2:]
        assert all("inventory" not in o for o in llm.offered[2:]) and rec.loop_hidden_turns >= 6
    else:
        assert acts == ["inventory"] * 8 and rec.loop_hidden_turns == 0
    assert rec.grounding == {"choice": 8}


def test_embed_grounding_maps_free_text_to_an_admissible_command(env):
    said = iter(["go to bed 1", "pick up the book one", "finish"])
    llm = Policy(plan="take the book => you hold the book\nput the book on the sidetable => book on sidetable",
                 say=lambda p: next(said, "finish"))
    cfg = ExperienceConfig(episode_action_cap=6, action_grounding="embed", action_shortlist=0,
                           subtask_as_command=False)
    agent = PlanExecuteAgent(llm, "alfworld", None, cfg, count_tokens=pr.approx_tokens, encoder=HashEncoder())
    rec = agent.run_task(env, game=GAME)
    first = rec.subtasks[0]
    # "go to bed 1" is admissible (exact); "pick up the book one" is not, and maps to the nearest command.
    assert first["actions"][:2] == ["go to bed 1", "take book 1 from bed 1"]
    assert first["claimed"] and first["flag"], first["report"]  # the reflect agent accepts: book 1 in inventory
    assert rec.grounding["exact"] >= 2 and rec.grounding["embed"] == 1
    assert "Commands you can use now:" in agent.action_prompt(agent_subtask(), [], {}, False, ["look"])


def agent_subtask():
    from metacog_fast.experience.trajectory import SubTask

    return SubTask("x", "y")


def test_choose_grounding_uses_the_llm_ranking_for_non_admissible_text(env):
    ranked = []

    def pick(options):
        ranked.append(options)
        return options.index("go to bed 1")

    said = iter(["walk to the bed", "finish"])
    llm = Policy(say=lambda p: next(said, "finish"), pick=pick)
    rec = PlanExecuteAgent(llm, "alfworld", None, ExperienceConfig(episode_action_cap=4, action_grounding="choose",
                                                                  action_shortlist=0),
                           count_tokens=pr.approx_tokens).run_task(env, game=GAME)
    assert rec.subtasks[0]["actions"][0] == "go to bed 1"
    assert ranked and "finish" in ranked[0] and rec.grounding["choose"] == 1


def test_subtask_commands_match():
    cmds = ["go to bed 1", "take book 1 from bed 1", "take book 2 from bed 1", "take pillow 1 from bed 1",
            "examine bed 1", "move book 1 to sidetable 1", "look"]
    assert subtask_commands("take the book", cmds) == ["take book 1 from bed 1", "take book 2 from bed 1"]
    assert subtask_commands("pick up the book", cmds) == ["take book 1 from bed 1", "take book 2 from bed 1"]
    assert subtask_commands("put the book on the sidetable", cmds) == ["move book 1 to sidetable 1"]
    assert subtask_commands("find the book", cmds) == []  # no command spells out "find"
    assert subtask_commands("look", cmds) == []  # one word: too vague to ground
    assert subtask_commands("go to the bed", cmds) == ["go to bed 1"]


def test_subtask_as_command_and_shortlist_restrict_the_options(env):
    # "take the book" at the start: no take command yet -> shortlist of 3 nearest commands; at bed 1 the
    # take commands are offered alone (with finish); the policy takes the first option it is given.
    def act(prompt, options):
        return next(o for o in options if o.startswith("take ")) if any(o.startswith("take ") for o in options) \
            else ("go to bed 1" if "go to bed 1" in options else options[0])

    llm = Policy(plan="take the book => you hold the book\nput the book on the sidetable => book on sidetable",
                 act=act)
    cfg = ExperienceConfig(episode_action_cap=4, subtask_action_cap=2, action_shortlist=3)
    rec = PlanExecuteAgent(llm, "alfworld", None, cfg, count_tokens=pr.approx_tokens).run_task(env, game=GAME)
    first = llm.offered[0]
    assert len(first) == 3 + 1 and first[-1] == "finish" and "go to bed 1" in first
    assert rec.subtasks[0]["actions"][:2] == ["go to bed 1", "take book 1 from bed 1"]
    at_bed = llm.offered[1]
    assert at_bed == ["take book 1 from bed 1", "take book 2 from bed 1", "finish"]
    assert rec.grounding["subtask_command_turns"] >= 1
    with pytest.raises(ValueError, match="action_shortlist"):
        ExperienceConfig(action_shortlist=-1)


@pytest.mark.parametrize("breaking", [True, False])
def test_a_fetched_guide_is_not_offered_again_in_the_subtask(env, breaking):
    from metacog_fast.experience import entries as en
    from metacog_fast.experience.memory import ExperienceMemory

    mem = ExperienceMemory(ExperienceConfig())
    mem.add_sop(en.SOP("alfworld", "find book", ["task type: pick_and_place_simple"], ["go to bed <n>"]))
    mem.add_sop(en.SOP("alfworld", "clean the mug", [], ["clean mug <n> with sinkbasin <n>"]))

    def act(prompt, options):
        guides = [o for o in options if o.startswith("access_guide")]
        return guides[0] if guides else "finish"

    llm = Policy(plan="find the book => you see the book\ntake the book => you hold the book", act=act)
    cfg = ExperienceConfig(episode_action_cap=6, subtask_action_cap=5, loop_breaking=breaking, action_shortlist=0,
                           subtask_as_command=False, retry_without_procedural=False)
    rec = PlanExecuteAgent(llm, "alfworld", mem, cfg, count_tokens=pr.approx_tokens).run_task(env, game=GAME)
    first = rec.subtasks[0]["actions"]
    if breaking:
        # "find book" was auto-consulted, so only "clean the mug" is offered, once; then finish.
        assert first[:2] == ["access_guide find book", "access_guide clean the mug"]
        assert first.count("access_guide clean the mug") == 1 and rec.subtasks[0]["claimed"]
        assert "access_guide find book" not in llm.offered[0]
    else:
        assert first[0] == "access_guide find book" and len(first) == 1 + 5  # auto fetch + 5 repeated fetches
        assert not rec.subtasks[0]["claimed"]


@pytest.mark.parametrize("show", [True, False])
def test_hidden_strategic_memory_is_in_no_prompt_and_not_counted(env, show):
    from metacog_fast.experience import entries as en
    from metacog_fast.experience.memory import ExperienceMemory

    mem = ExperienceMemory(ExperienceConfig())
    mem.add_strategic(en.StrategicEntry("a sub-task uses all its actions", "Check the goal before moving on."))
    llm = Policy(act=lambda p, o: "finish")
    cfg = ExperienceConfig(episode_action_cap=4, subtask_action_cap=2, show_strategic=show, learn=True)
    PlanExecuteAgent(llm, "alfworld", mem, cfg, count_tokens=pr.approx_tokens).run_task(env, game=GAME)
    lesson = "Check the goal before moving on."
    acting = [p for p in llm.prompts if "Current sub-task:" in p]
    planning = [p for p in llm.prompts if "Split the task" in p]
    assert acting and planning and all((lesson in p) == show for p in acting + planning)
    entry = next(s for s in mem.strategic if s.strategy == "Check the goal before moving on.")
    assert entry.counts.uses == (1 if show else 0)
