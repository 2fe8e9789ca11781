"""The reflector's pre-deployment: reflection outcomes collected in the real ALFWorld with the
embedded LLM (resumable, same prompt for every sampled reflection), preference pairs from them, and
a tiny DPO run that raises the chosen reflections' margin and exports to a GGUF adapter (on the
tiny Llama of ``finetune_base``, and on the shipped SmolLM2 under ``-m slow``)."""
from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("trl")
pytest.importorskip("alfworld")

from metacog_fast.alfworld.finetune.reflections import ReflectionDataConfig, collect, preference_pairs, quality  # noqa: E402

# bf16 autocast rounds the reference's log-probs a little differently when they are computed before
# training instead of inside each step, and the six steps then drift apart by rounding alone
SPEED_OPTION_LOSS_TOL = 0.02


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    from metacog_fast.envs import probe_envs

    (probe,) = probe_envs(names=["alfworld"])
    if not probe.usable:
        pytest.skip(probe.reason)
    out = tmp_path_factory.mktemp("refl") / "c"
    # the base actor with 3 steps fails its first attempt, so reflections are sampled and replayed
    cfg = ReflectionDataConfig(games=1, actor=None, examples=0, reflections=2, max_steps=3, temperature=1.0)
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


@pytest.mark.starts_first(seconds=50)
def test_tiny_dpo_run_learns_the_preference_and_exports(collected, finetune_base, tmp_path, monkeypatch):
    from metacog_fast.alfworld.finetune.dpo import DPOTrainConfig, load_pairs, train_dpo
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
    second = tmp_path / "pairs2"  # two collections' pairs are joined
    second.mkdir()
    for d, games in ((pairs_dir, range(2)), (second, range(2, 4))):
        (d / "pairs.jsonl").write_text("".join(
            json.dumps({"game": f"g{i}", "task_type": "t", "messages": rec["messages"], "chosen": good, "rejected": bad}) + "\n"
            for i in games))
    run = tmp_path / "run"
    # prompts cut from the left to their last 256 tokens (the reflection request and the attempt's end)
    fast = DPOTrainConfig(base=finetune_base, batch_size=2, micro_batch_size=2, epochs=3.0, learning_rate=5e-4,
                          save_steps=100, max_length=256)
    facts = train_dpo([pairs_dir, second], run, fast, max_steps=6)
    log = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in log if "loss" in r]
    margins = [r["rewards/margins"] for r in log if "rewards/margins" in r]
    assert facts["steps"] == 6 and len(losses) == 6 and facts["pairs"] == 4 and facts["games"] == 4
    assert losses[0] == pytest.approx(0.6931, abs=0.02)  # log 2: policy == reference at the start
    assert losses[-1] < losses[0] and margins[-1] > margins[0]
    # the speed-only options (trl's defaults: activations recomputed, the reference run every step)
    # train the same run, and a finished or interrupted run resumes whatever they are
    slow = dataclasses.replace(fast, gradient_checkpointing=True, precompute_ref=False)
    train_dpo([pairs_dir, second], tmp_path / "run_slow", slow, max_steps=6)
    slow_log = [json.loads(x) for x in (tmp_path / "run_slow" / "train_log.jsonl").read_text().splitlines()]
    slow_losses = [r["loss"] for r in slow_log if "loss" in r]
    assert slow_losses == pytest.approx(losses, abs=SPEED_OPTION_LOSS_TOL), (slow_losses, losses)
    assert train_dpo([pairs_dir, second], run, slow, max_steps=6)["steps"] == 6
    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path / "models"))
    model = export_gguf(run, tmp_path / "export", ExportConfig(format="adapter"))
    assert model["bytes"] < 16 * 2**20
    llm = open_llm(f"llama-cpp://{tmp_path / 'export'}", n_threads=1, n_ctx=2048)
    try:
        assert llm.chat(rec["messages"], max_tokens=8)[0].completion_tokens > 0
    finally:
        llm.close()


def _collection(root, reflector, per_game, actor="finetuned:alfworld"):
    from metacog_fast.alfworld.store import write_json_atomic

    (root / "games").mkdir(parents=True)
    write_json_atomic(root / "config.json", {"actor": actor, "reflector": reflector})
    for g, outcomes in per_game.items():
        write_json_atomic(root / "games" / f"{g}.json", {
            "game": g, "task_type": "t", "first": {"won": outcomes is None},
            "reflections": [] if outcomes is None else [{"text": f"r{k}", "next_won": w} for k, w in enumerate(outcomes)]})


def test_reflectors_are_compared_game_by_game(tmp_path):
    from metacog_fast.alfworld.finetune.reflections import compare_reflectors

    a, b = tmp_path / "dpo", tmp_path / "base"
    _collection(a, "dpo", {"g1": [True, True], "g2": [True, False], "g3": [True, True], "g4": None, "g5": [False]})
    _collection(b, None, {"g1": [False, False], "g2": [False, False], "g3": [True, False], "g4": None})
    c = compare_reflectors(a, b, resamples=2000)
    assert c["games"] == 3 and c["games_only_a"] == 1 and c["games_only_b"] == 0
    assert c["quality_a"]["next_attempts"]["successes"] == 5 and c["quality_a"]["next_attempts"]["n"] == 6
    assert c["quality_b"]["next_attempts"]["successes"] == 1
    assert c["paired"]["diff"] == pytest.approx((1.0 + 0.5 + 0.5) / 3) and c["paired"]["n"] == 3
    assert c["identity_a"] is None  # no identity.json: said so, not invented
    (a / "identity.json").write_text(json.dumps({"actor": {"sha256": "x"}, "reflector": {"adapter_sha256": "y"}}))
    assert compare_reflectors(a, b, resamples=100)["identity_a"]["reflector"] == {"adapter_sha256": "y"}
    other = tmp_path / "other_actor"
    _collection(other, None, {"g1": [False], "g2": [True]}, actor="finetuned:alfworld-x")
    with pytest.raises(ValueError, match="different actors"):
        compare_reflectors(a, other)
    with pytest.raises(ValueError, match="not a reflection collection"):
        compare_reflectors(a, tmp_path / "missing")


def test_skip_games_leaves_out_the_first_games():
    from metacog_fast.alfworld.finetune.reflections import collection_games

    first = collection_games(ReflectionDataConfig(games=12))
    rest = collection_games(ReflectionDataConfig(games=6, skip_games=12))
    assert not {g["game"] for g in first} & {g["game"] for g in rest} and len(rest) == 6
    assert len({g["task_type"] for g in rest}) == 6
    with pytest.raises(ValueError, match="skip_games"):
        ReflectionDataConfig(skip_games=-1).validate()
