"""The reflector's pre-deployment: reflection outcomes collected in the real ALFWorld with the
embedded LLM (resumable, same prompt for every sampled reflection), preference pairs from them, and
a tiny DPO run that raises the chosen reflections' margin and exports to a GGUF adapter."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")
pytest.importorskip("alfworld")

from metacog_fast.finetune.reflections import ReflectionDataConfig, collect, preference_pairs, quality  # noqa: E402


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    from metacog_fast.envs import probe_envs

    (probe,) = probe_envs(names=["alfworld"])
    if not probe.usable:
        pytest.skip(probe.reason)
    out = tmp_path_factory.mktemp("refl") / "c"
    # the base actor with 3 steps fails its first attempt, so reflections are sampled and replayed
    cfg = ReflectionDataConfig(games=1, actor=None, reflections=2, max_steps=3, temperature=1.0)
    return out, cfg, collect(out, cfg)


def test_collection_samples_distinct_reflections_on_one_prompt_and_resumes(collected):
    out, cfg, manifest = collected
    (rec,) = [json.loads(p.read_text()) for p in (out / "games").glob("*.json")]
    assert manifest["games"] == 1 and manifest["first_attempt_wins"] == 0 and not rec["first"]["won"]
    assert rec["messages"][0]["role"] == "system" and "End of the attempt" in rec["messages"][1]["content"]
    played = [r for r in rec["reflections"] if "next_won" in r]
    assert len(rec["reflections"]) == 2 and played
    assert len({r["text"] for r in played}) == len(played)  # repeats are not replayed
    assert all(1 <= r["next_steps"] <= 3 for r in played)
    assert manifest["quality"]["next_attempts"]["n"] == len(played)
    again = collect(out, cfg)  # nothing left to play: the same manifest
    assert again["pairs_sha256"] == manifest["pairs_sha256"]
    with pytest.raises(ValueError, match="another configuration"):
        collect(out, ReflectionDataConfig(games=1, actor=None, reflections=3, max_steps=3, temperature=1.0))


def test_pairs_and_quality_from_records():
    msgs = [{"role": "user", "content": "x"}]
    recs = [{"game": "g1", "task_type": "t", "messages": msgs, "reflections": [
                {"text": "a", "next_won": True}, {"text": "b", "next_won": False},
                {"text": "c", "next_won": False}, {"text": "", "skipped": "empty"}]},
            {"game": "g2", "task_type": "t", "messages": msgs, "reflections": [{"text": "d", "next_won": False}]}]
    pairs = preference_pairs(recs)
    assert [(p["chosen"], p["rejected"]) for p in pairs] == [("a", "b"), ("a", "c")]
    q = quality(recs)
    assert q["next_attempts"]["successes"] == 1 and q["next_attempts"]["n"] == 4
    assert q["games_with_failed_first"] == 2 and q["per_game_mean"] == pytest.approx((1 / 3 + 0) / 2)
    with pytest.raises(ValueError, match="temperature"):
        ReflectionDataConfig(temperature=0.0).validate()
    with pytest.raises(ValueError, match="evaluation split"):
        ReflectionDataConfig(split="valid_train").validate()


def test_tiny_dpo_run_learns_the_preference_and_exports(collected, tmp_path, monkeypatch):
    from metacog_fast.finetune.dpo import DPOTrainConfig, load_pairs, train_dpo
    from metacog_fast.finetune.export import ExportConfig, export_gguf
    from metacog_fast.llm import open_llm

    out, _cfg, _m = collected
    (rec,) = [json.loads(p.read_text()) for p in (out / "games").glob("*.json")]
    # a pair set on the collected prompt: a concrete plan preferred over a vague remark
    pairs_dir = tmp_path / "pairs"
    pairs_dir.mkdir()
    with pytest.raises(FileNotFoundError, match="pairs.jsonl not found"):
        load_pairs(pairs_dir)
    (pairs_dir / "pairs.jsonl").write_text("")
    with pytest.raises(ValueError, match="no preference pair"):
        load_pairs(pairs_dir)
    good = "Next time go to the countertop first, take the object, then put it in the target receptacle."
    bad = "It was fine."
    (pairs_dir / "pairs.jsonl").write_text("".join(
        json.dumps({"game": f"g{i}", "task_type": "t", "messages": rec["messages"], "chosen": good, "rejected": bad}) + "\n"
        for i in range(4)))
    run = tmp_path / "run"
    facts = train_dpo(pairs_dir, run, DPOTrainConfig(batch_size=2, micro_batch_size=2, epochs=3.0, learning_rate=5e-4,
                                                     save_steps=100), max_steps=6)
    log = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if "loss" in r]
    margins = [r["rewards/margins"] for r in log if "rewards/margins" in r]
    assert facts["steps"] == 6 and len(losses) == 6
    assert losses[0] == pytest.approx(0.6931, abs=0.02)  # log 2: policy == reference at the start
    assert losses[-1] < losses[0] and margins[-1] > margins[0]
    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path / "models"))
    model = export_gguf(run, tmp_path / "export", ExportConfig(format="adapter"))
    assert model["bytes"] < 16 * 2**20
    llm = open_llm(f"llama-cpp://{tmp_path / 'export'}", n_threads=1, n_ctx=2048)
    try:
        assert llm.chat(rec["messages"], max_tokens=8)[0].completion_tokens > 0
    finally:
        llm.close()
