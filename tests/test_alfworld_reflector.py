"""A reflection LLM apart from the actor (paper 000's Reflexion + SL: SFT actor, DPO reflector):
the reflections come from the reflector, the actor writes none, the episode record counts both
models' calls, and the run configuration carries it (label, validation, resume of older folders)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from alfworld_helpers import shared_encoder
from metacog_fast.alfworld.config import AgentConfig, RunConfig
from metacog_fast.runs.folder import config_differences

TINY = dict(examples=0, max_steps=2, action_max_tokens=12, max_thinks=1, reflection_max_tokens=12,
            plan_max_tokens=12, rollouts=2, rollout_max_tokens=12, rollout_pairs=2, example_max_steps=12)


@pytest.fixture(scope="module")
def actor():
    from metacog_fast.llm import open_llm

    m = open_llm(n_threads=1, n_ctx=4096)
    yield m
    m.close()


@pytest.fixture(scope="module")
def reflector():
    from metacog_fast.llm import open_llm

    m = open_llm(n_threads=1, n_ctx=4096)
    yield m
    m.close()


def test_react_with_a_reflector_is_refused():
    with pytest.raises(ValueError, match="reflector"):
        RunConfig(agent="react", reflector="finetuned:alfworld").validate()
    RunConfig(agent="reflexion", reflector="finetuned:alfworld").validate()


def test_an_older_snapshot_without_the_new_fields_resumes():
    old = RunConfig(agent="reflexion").to_dict()
    for k in ("reflector", "label"):
        old.pop(k)
    assert config_differences(old, RunConfig(agent="reflexion").to_dict()) == []
    assert config_differences(old, RunConfig(agent="reflexion", reflector="x").to_dict()) == ["reflector"]


def test_a_run_label_names_the_row():
    from metacog_fast.alfworld.report import ordered, run_label

    taken: dict = {}
    taken[run_label({"agent": "reflexion", "adapt_episodes": 2, "label": "reflexion+sl"}, taken)] = {}
    taken[run_label({"agent": "reflexion", "adapt_episodes": 2}, taken)] = {}
    taken[run_label({"agent": "react", "adapt_episodes": 2, "label": None}, taken)] = {}
    assert set(taken) == {"reflexion+sl", "reflexion", "react"}
    assert ordered(taken) == ["react", "reflexion", "reflexion+sl"]


def test_reflections_come_from_the_reflector_and_count_in_the_record(tmp_path, actor, reflector):
    from metacog_fast.alfworld.episode import run_episode
    from metacog_fast.alfworld.fewshot import load_examples
    from metacog_fast.alfworld.memory import ReflectionMemory
    from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT, make_agent, select_games
    from metacog_fast.envs import make_env

    enc = shared_encoder()
    ac = AgentConfig(**TINY)
    ex = load_examples(DEFAULT_FEWSHOT, ac.examples, ac.example_max_steps)
    mem = ReflectionMemory(tmp_path / "m.db", enc)
    env = make_env("alfworld", split="valid_train", max_episode_steps=2)
    (g,) = select_games("valid_train", 1)
    try:
        for name in ("reflexion", "fcrf"):
            agent = make_agent(name, actor, ex, ac, enc, mem, reflector=reflector)
            agent.restore(g["game"], [])
            a0, r0 = actor.usage.calls, reflector.usage.calls
            rec = run_episode(env, agent, actor, g["game"], g["gamefile"], 0, "adapt", 2, reflector=reflector)
            acting = actor.usage.calls - a0
            reflecting = reflector.usage.calls - r0
            assert rec["steps"] == 2 and acting >= 2  # the actor chose the actions ...
            assert reflecting >= 1 and rec["end"]["reflection"]  # ... the reflector wrote the reflection
            assert rec["llm"]["calls"] == acting + reflecting  # both models counted once each
            assert mem.last(g["game"], 1) == [rec["end"]["reflection"]]
            mem.clear(g["game"])
        # The same agent without a reflector reflects with the actor.
        agent = make_agent("reflexion", actor, ex, ac, enc, mem)
        r0 = reflector.usage.calls
        rec = run_episode(env, agent, actor, g["game"], g["gamefile"], 0, "adapt", 2)
        assert reflector.usage.calls == r0 and rec["end"]["reflection"]
    finally:
        env.close()
        mem.close()


def test_reflecting_only_after_failures(tmp_path, actor):
    """reflect_on="failure": a failed episode is reflected on as always; a won one adds no
    reflection (FCRF still grows its lesson pool from the fail -> success pair), and the reflections
    already written stay. Bad values are refused by name; an older snapshot resumes."""
    from metacog_fast.alfworld.episode import run_episode
    from metacog_fast.alfworld.fewshot import load_examples
    from metacog_fast.alfworld.memory import ReflectionMemory
    from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT, make_agent, select_games
    from metacog_fast.envs import make_env

    with pytest.raises(ValueError, match="reflect_on"):
        AgentConfig(reflect_on="sometimes").validate()
    old = RunConfig(agent="reflexion").to_dict()
    old["agent_config"].pop("reflect_on")
    assert config_differences(old, RunConfig(agent="reflexion").to_dict()) == []

    enc = shared_encoder()
    ac = AgentConfig(**{**TINY, "reflect_on": "failure"})
    ex = load_examples(DEFAULT_FEWSHOT, ac.examples, ac.example_max_steps)
    llm = actor
    mem = ReflectionMemory(tmp_path / "m.db", enc)
    env = make_env("alfworld", split="valid_train", max_episode_steps=2)
    (g,) = select_games("valid_train", 1)
    try:
        for name in ("reflexion", "fcrf"):
            agent = make_agent(name, llm, ex, ac, enc, mem)
            agent.restore(g["game"], [])
            rec = run_episode(env, agent, llm, g["game"], g["gamefile"], 0, "adapt", 2)
            assert not rec["won"] and rec["end"]["reflection"]  # 2 steps do not win: reflected on
            kept = mem.last(g["game"], 3)
            assert kept == [rec["end"]["reflection"]]
            c0 = llm.usage.calls
            info = agent.end(True, [tuple(p) for p in rec["pairs"]])  # a won episode
            assert "reflection" not in info and mem.last(g["game"], 3) == kept
            if name == "reflexion":
                assert info == {} and llm.usage.calls == c0  # no reflection call at all
            else:
                assert llm.usage.calls == c0 + 1  # only the lesson of the fail -> success pair
            mem.clear(g["game"])
    finally:
        env.close()
        mem.close()


def test_a_finetuned_actor_prompted_unlike_its_training_is_warned(tmp_path):
    """The shipped actor was trained on prompts without few-shot examples: a run that gives it the
    default 2 warns and names the flag; one that matches does not; the base model has no setting."""
    import warnings

    from metacog_fast.alfworld.protocol import prepare_run
    from metacog_fast.llm.models import trained_examples

    k = trained_examples("finetuned:alfworld")
    assert k == 0 and trained_examples(None) is None
    with pytest.warns(UserWarning, match="--examples 0"):
        prepare_run(tmp_path / "a", RunConfig(agent="react", llm="finetuned:alfworld", tasks=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepare_run(tmp_path / "b", RunConfig(agent="react", llm="finetuned:alfworld", tasks=1,
                                              agent_config=AgentConfig(examples=0)))
        prepare_run(tmp_path / "c", RunConfig(agent="react", tasks=1))


def test_model_identity_follows_content_not_names_or_paths(tmp_path, monkeypatch):
    """A model folder's identity is its files' hashes: the same after a move to another path, another
    once the name is given to a different model; an ALFWorld run folder started with one model under
    ``finetuned:NAME`` refuses to resume once NAME stands for another, and so does a reflection
    collection that has games."""
    import shutil

    from metacog_fast.alfworld.protocol import prepare_run
    from metacog_fast.alfworld.finetune.reflections import claim_collection, claim_identity
    from metacog_fast.llm.models import default_gguf, model_identity, models_identity

    def folder(path, extra=b""):
        path.mkdir(parents=True)
        (path / "model.gguf").write_bytes(Path(default_gguf()).read_bytes() + extra)
        (path / "model.json").write_text(json.dumps({"format": "merged", "file": "model.gguf",
                                                     "prompt": {"examples": 0}}))
        return path

    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("METACOG_MODELS", raising=False)
    monkeypatch.delenv("METACOG_LLM", raising=False)
    a = folder(tmp_path / "home" / "actor", extra=b"one model")
    first = model_identity("finetuned:actor")
    assert first == model_identity(f"llama-cpp://{a}") and set(first) == {"sha256"}
    shutil.copytree(a, tmp_path / "moved")
    assert model_identity(f"llama-cpp://{tmp_path / 'moved'}") == first
    assert model_identity(None) == model_identity("llama-cpp://") != first
    monkeypatch.setenv("METACOG_LLM", "finetuned:actor")  # None is what open_llm(None) would open
    assert model_identity(None) == first
    monkeypatch.delenv("METACOG_LLM")
    assert model_identity("http://127.0.0.1:9/v1") is None
    shipped = model_identity("finetuned:alfworld")
    assert set(shipped) == {"adapter_sha256", "base_sha256", "serving"}
    assert shipped["base_sha256"] == model_identity(None)["sha256"]

    cfg = RunConfig(agent="react", llm="finetuned:actor", tasks=1, agent_config=AgentConfig(examples=0))
    prepare_run(tmp_path / "run", cfg)
    prepare_run(tmp_path / "run", cfg)  # the same model resumes
    coll = claim_collection(tmp_path / "coll", {"actor": "finetuned:actor"})
    claim_identity(coll, models_identity(actor="finetuned:actor"))
    (coll / "games" / "g.json").write_text("{}")

    shutil.rmtree(a)
    folder(a, extra=b"another model")
    assert model_identity("finetuned:actor") != first
    with pytest.raises(ValueError, match="what llm stands for changed"):
        prepare_run(tmp_path / "run", cfg)
    with pytest.raises(ValueError, match="what actor stands for changed"):
        claim_identity(coll, models_identity(actor="finetuned:actor"))
    with pytest.raises(ValueError, match="finetuned:nope: unknown model name"):
        model_identity("finetuned:nope")


def test_a_collection_grows_or_is_cut_short_but_keeps_its_configuration(tmp_path):
    """A reflection collection's game count is a prefix of one round-robin order: rerunning it with
    another count reopens the same folder (config.json keeps the latest count), any other field is refused."""
    from metacog_fast.alfworld.finetune.reflections import claim_collection, collection_games, ReflectionDataConfig

    conf = {"split": "train", "games": 100, "skip_games": 1800, "reflections": 8}
    claim_collection(tmp_path / "c", conf, resizable=("games",))
    claim_collection(tmp_path / "c", {**conf, "games": 48}, resizable=("games",))
    assert json.loads((tmp_path / "c" / "config.json").read_text())["games"] == 48
    with pytest.raises(ValueError, match="another configuration"):
        claim_collection(tmp_path / "c", {**conf, "games": 48, "reflections": 4}, resizable=("games",))
    with pytest.raises(ValueError, match="another configuration"):
        claim_collection(tmp_path / "c", {**conf, "games": 100})  # a count is only resizable when asked
    short = collection_games(ReflectionDataConfig(split="valid_seen", games=10, skip_games=6))
    long = collection_games(ReflectionDataConfig(split="valid_seen", games=20, skip_games=6))
    assert long[:10] == short  # the smaller collection is the start of the larger one
