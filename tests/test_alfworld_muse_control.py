"""MUSE's competence-aware loop (issue 49 item 4) and the actor log-probability in the records (item 1):
the greedy candidate and the margin rule, the plan kept out of the actor's prompt, the competence
trigger (more rollouts / a new plan), the defaults of new and resumed run folders. Real embedded LLM
(llama.cpp, CPU), real MiniLM scorer, short prompts (no few-shot examples)."""
from __future__ import annotations

import json

import pytest

from alfworld_helpers import HISTORY, INTRO, TASK, TYPE, llm, muse_at, scorer  # noqa: F401 (fixtures)
from metacog_fast.alfworld import prompts
from metacog_fast.alfworld.actions import ActionMapper
from metacog_fast.alfworld.agents import EpisodeContext, MuseAgent, ReActAgent
from metacog_fast.alfworld.config import AgentConfig, RunConfig, resolve_run_defaults
from metacog_fast.alfworld.report import selection_counts, trigger_counts
from metacog_fast.runs.folder import config_differences

LP_TOL = 1e-3
"""Generated-token log-probabilities against llama.cpp's scoring of the same text (tests/test_llm_logprobs.py)."""
TOKENS = 12
"""Tokens of a rollout."""


@pytest.fixture(scope="module")
def memory(scorer, tmp_path_factory):
    from metacog_fast.alfworld.memory import ReflectionMemory

    m = ReflectionMemory(tmp_path_factory.mktemp("memory") / "m.db", scorer.encoder)
    yield m
    m.close()


def muse(llm, scorer, select="highest", memory=None, **kw) -> MuseAgent:
    cfg = AgentConfig(**{**dict(examples=0, rollouts=3, rollout_max_tokens=TOKENS, plan_max_tokens=8, seed=5,
                                seed_scheme="episode"), **kw})
    return muse_at(llm, scorer, cfg, select, memory)


def rollout_of(llm, scorer, text: str, prompt: str) -> list:
    """The recorded (action, observation) pairs of one rollout text."""
    return muse(llm, scorer)._select([text], None, prompt).info["rollouts"][0]


def _scored_logprob(llm, prompt: str, text: str, tokens: int) -> float | None:
    """llama.cpp's own log-likelihood of ``text`` after ``prompt``, where ``text`` re-tokenizes into
    the ``tokens`` it was generated as (else None: the two tokenizations are not comparable)."""
    if len(llm.session.tokenize(text, bos=False, special=False)) != tokens:
        return None
    return llm.choose(prompt, [text]).logprobs[0]


def test_greedy_candidate_and_the_margin_rule(llm, scorer):
    a = muse(llm, scorer, greedy_candidate=True, select_margin=1.0)
    prompt = a.prompt()
    d = a.act(None)
    greedy = llm.complete(prompt, temperature=0.0, max_tokens=TOKENS)[0].text
    assert d.info["greedy_candidate"] and d.info["rollouts"][0] == rollout_of(llm, scorer, greedy, prompt)
    # a margin no score gap reaches (scores are probabilities): the greedy action is executed
    assert d.info["chosen"] == 0 and d.info["greedy_replaced"] is False and d.action == d.info["rollouts"][0][0][0]
    s = d.info["scores"]
    assert d.info["greedy_gap"] == pytest.approx(max(s[1:]) - s[0])
    # the same rollouts under margin 0: the highest score wins unless it is the greedy one's (ties keep it)
    texts = [greedy] + [llm.generate_many([prompt], temperature=0.5, max_tokens=TOKENS, seed=d.info["rollout_seed"] + i)[0].text
                        for i in (1, 2)]
    for margin in (0.0, 1.0):
        b = muse(llm, scorer, greedy_candidate=True, select_margin=margin)
        e = b._select(texts, None, prompt)
        best = 1 + max(range(2), key=lambda j: e.info["scores"][1 + j])
        win = e.info["scores"][best] > e.info["scores"][0] and margin == 0.0
        assert e.info["chosen"] == (best if win else 0) and e.info["greedy_replaced"] is win
    c = selection_counts([{"action": d.action, **d.info}])
    assert c["steps_greedy"] == 1 and c["steps_greedy_replaced"] == 0


def test_plan_in_prompt(llm, scorer, memory):
    off = muse(llm, scorer, memory=memory, plan_in_prompt=False)
    on = muse(llm, scorer, plan_in_prompt=None)  # older runs: the paper's prompt
    react = prompts.actor_prefix([], INTRO, [], None)
    assert off.prefix == react and "Plan:" not in off.prefix
    assert "Plan: 1. take the egg." in on.prefix
    # begin() writes the plan for M_sa either way; only the paper's agent shows it to the actor
    info = off.begin(EpisodeContext("g", TASK, TYPE, INTRO, 0))
    assert info["plan"] == off.current_plan and off.current_plan.startswith("1.")
    assert off.prefix == react


def test_trigger_more_rollouts(llm, scorer):
    # every M_sa score is below 1: two low steps fire; the next trigger_span steps decode 5 rollouts
    a = muse(llm, scorer, rollouts=2, trigger_threshold=1.0, trigger_steps=2, trigger_rollouts=5, trigger_span=1)
    d = [a.act(None) for _ in range(3)]
    assert [x.info["competence_low_steps"] for x in d] == [1, 2, 1]
    assert "trigger" not in d[0].info and "trigger" not in d[2].info
    t = d[1].info["trigger"]
    assert t["action"] == "rollouts" and t["rollouts_from"] == 2 and t["rollouts_to"] == 5 and t["steps"] == 1
    assert [len(x.info["rollouts"]) for x in d] == [2, 2, 5] and d[2].info["boosted_rollouts"] == 5
    recs = [{"won": False, "step_log": [{"action": x.action, **x.info} for x in d]},
            {"won": True, "step_log": [{"action": d[0].action, **d[0].info}]}]
    tc = trigger_counts(recs)
    assert tc == {"episodes": 2, "firings": 1, "per_episode_mean": 0.5, "per_episode_max": 1,
                  "episodes_with_firing": 1, "won_with_firing": 0, "by_action": {"rollouts": 1}}
    assert trigger_counts([{"won": True, "step_log": [{"action": "look"}]}]) is None


def test_trigger_more_rollouts_than_one_call_takes(llm, scorer):
    # more rollouts than the backend decodes in one call: groups, each rollout keeping seed + i
    n = llm.max_sequences + 1
    a = muse(llm, scorer, rollouts=1, trigger_threshold=1.0, trigger_steps=1, trigger_rollouts=n,
             rollout_max_tokens=4)
    a.act(None)
    d = a.act(None)
    assert len(d.info["rollouts"]) == n
    prompt = a.prompt()
    for i in (0, n - 1):  # the first group's first rollout and the second group's only one
        one = llm.generate_many([prompt], temperature=0.5, max_tokens=4, seed=d.info["rollout_seed"] + i)[0]
        assert d.info["rollouts"][i] == rollout_of(llm, scorer, one.text, prompt)


def test_trigger_replan(llm, scorer, memory):
    for plan_in_prompt in (False, None):
        a = muse(llm, scorer, memory=memory, rollouts=2, trigger_threshold=1.0, trigger_steps=1, trigger_action="replan",
                 plan_in_prompt=plan_in_prompt)
        before, calls = a.prefix, llm.usage.calls
        d = a.act(None)
        t = d.info["trigger"]
        assert llm.usage.calls == calls + 2  # the rollouts, then the new plan
        assert t["action"] == "replan" and t["old_plan"] == "1. take the egg. 2. heat it."
        assert a.current_plan == t["new_plan"] and t["new_plan"].startswith("1.")  # (the old one if empty)
        assert t["actor_prompt_changed"] is (plan_in_prompt is None)
        if plan_in_prompt is None:
            assert a.prefix == prompts.actor_prefix([], INTRO, [], t["new_plan"])
        else:
            assert a.prefix == before and "Plan:" not in a.prefix


SHORT = "### Your turn\nYou see a fridge 1.\nYour task is to: heat some egg.\n"
"""A prompt under 64 tokens: generation and scoring then compute every row in the same (small) ubatch
class (llama_batch.GEMM_ROWS). On longer prompts the prompt's last row is in the large class when
generating and in the small one when scoring, and the two differ by more than rounding (0.088 nats on
the one action line measured)."""


def test_action_logprob_recorded_and_equal_to_scoring(llm, scorer):
    a = muse(llm, scorer, greedy_candidate=True, select_margin=1.0)
    a.prefix, a.lines = SHORT, HISTORY[:1]
    prompt = a.prompt()
    assert len(llm.session.tokenize(prompt, bos=True, special=True)) < 64
    d = a.act(None)
    assert d.info["action_logprob"] <= 0.0 and d.info["action_logprob_tokens"] >= 1
    assert d.info["action_logprob"] == pytest.approx(d.info["action_logprob_sum"] / d.info["action_logprob_tokens"])
    greedy = llm.complete(prompt, temperature=0.0, max_tokens=TOKENS, stop=["\n"])[0].text  # rollout 0's first line
    ref = _scored_logprob(llm, prompt, greedy, d.info["action_logprob_tokens"])
    assert ref is not None  # the greedy line re-tokenizes as generated here: the check is not vacuous
    assert d.info["action_logprob_sum"] == pytest.approx(ref, abs=LP_TOL)

    r = ReActAgent(llm, {TYPE: []}, AgentConfig(examples=0, action_max_tokens=16), ActionMapper("none"))
    r.ctx, r.prefix, r.lines = a.ctx, SHORT, HISTORY[:1]
    rp = r.prompt()
    e = r.act(None)
    text = llm.complete(rp, temperature=0.0, max_tokens=16, stop=["\n"])[0].text
    ref = _scored_logprob(llm, rp, text, e.info["action_logprob_tokens"])
    assert ref is not None and e.info["action_logprob_sum"] == pytest.approx(ref, abs=LP_TOL)


def test_new_run_defaults_and_older_folders(tmp_path):
    from metacog_fast.alfworld.protocol import prepare_run, resolved_config

    ac = AgentConfig()
    new = resolve_run_defaults("muse", ac, None)
    assert (new.reflect_on, new.seed_scheme, new.greedy_candidate, new.plan_in_prompt) == \
        ("failure", "episode", True, False)
    r = resolve_run_defaults("react", ac, None)
    assert (r.reflect_on, r.seed_scheme, r.greedy_candidate, r.plan_in_prompt) == (None, None, None, None)
    assert resolve_run_defaults("reflexion", ac, None).reflect_on == "failure"
    # explicit values stay; a snapshot's values are taken over, its missing fields stay None (old behaviour)
    assert resolve_run_defaults("muse", AgentConfig(reflect_on="every"), None).reflect_on == "every"
    old = resolve_run_defaults("muse", ac, {"reflect_on": None, "greedy_candidate": True})
    assert (old.reflect_on, old.seed_scheme, old.greedy_candidate, old.plan_in_prompt) == (None, None, True, None)

    # a folder written before these options resumes with its behaviour, and its snapshot is unchanged
    cfg = RunConfig(agent="reflexion", tasks=1)
    snap = cfg.to_dict()
    for k in ("reflect_on", "seed_scheme", "greedy_candidate", "select_margin", "plan_in_prompt",
              "trigger_threshold", "trigger_steps", "trigger_action", "trigger_rollouts", "trigger_span"):
        snap["agent_config"].pop(k)
    run = tmp_path / "old"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"config": snap}))
    assert resolved_config(run, cfg).agent_config.reflect_on is None
    prepare_run(run, cfg)
    kept = json.loads((run / "config.json").read_text())["config"]["agent_config"]
    assert {k: v for k, v in kept.items() if k in snap["agent_config"]} == snap["agent_config"]
    assert all(kept[k] is None for k in set(kept) - set(snap["agent_config"]))  # null: as before the option
    assert config_differences(snap, resolved_config(run, cfg).to_dict()) == []
    # a new folder records the new defaults, and resumes with them without a flag
    prepare_run(tmp_path / "new", cfg)
    assert json.loads((tmp_path / "new" / "config.json").read_text())["config"]["agent_config"]["reflect_on"] == "failure"
    prepare_run(tmp_path / "new", cfg)


def test_option_validation():
    for kw, name in ((dict(select_margin=-0.1), "select_margin"), (dict(select_margin=float("nan")), "select_margin"),
                     (dict(trigger_threshold=0.0), "trigger_threshold"), (dict(trigger_steps=0), "trigger_steps"),
                     (dict(trigger_action="panic"), "trigger_action"), (dict(seed_scheme="x"), "seed_scheme"),
                     (dict(greedy_candidate=1), "greedy_candidate"), (dict(trigger_rollouts=0), "trigger_rollouts"),
                     (dict(trigger_threshold=0.5, decode_only_pick=True), "trigger_threshold")):
        with pytest.raises(ValueError, match=name):
            AgentConfig(**kw).validate()
    assert AgentConfig(rollouts=4).get("trigger_rollouts") == 8 and AgentConfig().get("select_margin") == 0.0


def test_flags(tmp_path):
    import argparse

    from metacog_fast.alfworld.cli import add_run_arguments, run_config

    p = argparse.ArgumentParser()
    add_run_arguments(p)
    base = ["--agent", "muse", "--out", str(tmp_path / "x"), "--scorer", str(tmp_path)]
    ac = run_config(p.parse_args(base)).agent_config
    assert (ac.greedy_candidate, ac.plan_in_prompt, ac.seed_scheme, ac.select_margin, ac.trigger_threshold) == \
        (None, None, None, None, None)  # the run's defaults, resolved against the folder
    ac = run_config(p.parse_args(base + ["--greedy-candidate", "--select-margin", "0.02", "--no-plan-in-prompt",
                                         "--trigger-threshold", "0.3", "--trigger-action", "replan",
                                         "--seed-scheme", "worker"])).agent_config
    assert (ac.greedy_candidate, ac.select_margin, ac.plan_in_prompt, ac.trigger_threshold, ac.trigger_action,
            ac.seed_scheme) == (True, 0.02, False, 0.3, "replan", "worker")
