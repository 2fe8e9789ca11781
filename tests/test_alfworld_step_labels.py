"""Step labels from the hand-coded expert and the step-level M_sa trained on them (issue 49 item 2):
a real collection plays the actor on policy and records the expert's command, the candidates and
their log-likelihoods; the assessor's examples, rules and margin choice do what the manual says."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from metacog_fast.alfworld.finetune.step_assessor import (
    StepAssessorConfig,
    choose_margin,
    dagger_examples,
    pick,
    ranking,
    run_step_assessor,
    step_label_examples,
    training_examples,
)
from metacog_fast.alfworld.finetune.step_labels import StepLabelConfig, command_option, summarize_games

INTRO = ("You are in the middle of a room. Looking quickly around you, you see a fridge 1 and a sinkbasin 1.\n\n"
         "Your task is to: put a clean egg in fridge.")


def test_step_label_collection_plays_on_policy_and_scores_every_candidate(tmp_path):
    """One real game (shipped actor, llama.cpp, ALFWorld with the expert): the executed command is the
    greedy candidate, labels match the expert's command, every candidate and the expert's command
    carry a log-likelihood, and a rerun resumes without opening the actor."""
    pytest.importorskip("alfworld")
    pytest.importorskip("llama_cpp")
    import metacog_fast.llm as llm_mod
    from metacog_fast.alfworld.finetune.step_labels import collect_step_labels, folder_config, load_collection

    out = tmp_path / "labels"
    cfg = StepLabelConfig(split="train", max_games=1, skip_games=5, candidates=3, max_steps=3)
    m = collect_step_labels(out, cfg)
    [rec] = load_collection(out)
    assert m["games"] == 1 and m["steps"] == len(rec["steps"]) >= 1
    assert folder_config(out) == cfg
    executed = [a for a, _o in rec["pairs"] if not a.lower().startswith("think:")]
    for s in rec["steps"]:
        cands = [c["action"] for c in s["candidates"]]
        assert s["taken"] == cands[0] == executed[s["t"]]
        assert len(set(cands)) == len(cands) and 1 <= len(cands) <= 3
        assert sum(c["draws"] for c in s["candidates"]) <= 3
        assert all(np.isfinite(c["loglik"]) and c["loglik"] < 0 for c in s["candidates"])
        if s["label"] is not None:
            assert [c["label"] for c in s["candidates"]] == [int(c == s["label"]) for c in cands]
            assert np.isfinite(s["label_loglik"])
            if s["label"] in cands:
                assert s["label_loglik"] == s["candidates"][cands.index(s["label"])]["loglik"]

    def no_actor(*a, **k):
        raise AssertionError("the actor was opened although every game is there")

    orig = llm_mod.open_llm
    llm_mod.open_llm = no_actor
    try:
        assert collect_step_labels(out, cfg)["steps"] == m["steps"]
    finally:
        llm_mod.open_llm = orig
    with pytest.raises(ValueError, match="another configuration"):
        collect_step_labels(out, StepLabelConfig(split="train", max_games=1, skip_games=5, candidates=4, max_steps=3))


def test_step_label_config_refuses_held_out_splits_and_bad_values():
    with pytest.raises(ValueError, match="split: 'valid_unseen' is held out"):
        StepLabelConfig(split="valid_unseen").validate()
    with pytest.raises(ValueError, match="candidates: expected an int >= 1"):
        StepLabelConfig(candidates=0).validate()
    with pytest.raises(ValueError, match="temperature: expected a number >= 0"):
        StepLabelConfig(temperature=-1.0).validate()
    assert command_option("go to fridge 1") == " go to fridge 1\n"


def _dagger_record(gid: str = "g1") -> dict:
    return {"id": f"alfworld_dagger/train/{gid}", "split": "train", "intro": INTRO,
            "pairs": [["go to fridge 1", "The fridge 1 is closed."], ["think: egg", "OK."],
                      ["open fridge 1", "You open the fridge 1."]],
            "steps": [{"proposed": "go to fridge 1", "label": "go to fridge 1"},
                      {"proposed": "go to sinkbasin 1", "label": "open fridge 1"},
                      {"proposed": "look", "label": None}]}


def test_dagger_examples_label_the_proposal_and_add_the_experts_command():
    ex = dagger_examples([_dagger_record()], size=3)
    assert [(e["chunk"][-1][0], e["label"]) for e in ex] == [
        ("go to fridge 1", 1.0), ("go to sinkbasin 1", 0.0), ("open fridge 1", 1.0)]
    assert ex[0]["task"] == "Your task is to: put a clean egg in fridge." and ex[0]["chunk"] == [("go to fridge 1", "")]
    # step 1's history is the executed step 0 (the think line left out), then the candidate
    assert ex[1]["chunk"] == [("go to fridge 1", "The fridge 1 is closed."), ("go to sinkbasin 1", "")]
    bad = dict(_dagger_record(), split="valid_train")
    with pytest.raises(ValueError, match="train the assessor on train"):
        dagger_examples([bad])


def _label_record(game: str, split: str, steps: list[tuple[str | None, list[str], float]]) -> dict:
    """steps: (expert label, candidate actions, greedy log-likelihood)."""
    out = []
    pairs = []
    for t, (label, cands, ll) in enumerate(steps):
        out.append({"t": t, "label": label, "taken": cands[0], "label_loglik": -1.0,
                    "candidates": [{"action": c, "draws": 1 + (i == 0), "loglik": ll - i,
                                    "label": None if label is None else int(c == label)} for i, c in enumerate(cands)]})
        pairs.append([cands[0], f"obs {t}"])
    return {"game": game, "split": split, "task": "Your task is to: put a clean egg in fridge.",
            "task_type": "pick_clean_then_place_in_recep", "pairs": pairs, "steps": out, "won": False}


def test_step_label_examples_rows_and_training_with_the_expert():
    r = _label_record("g", "train", [("a", ["b", "a"], -1.0), ("c", ["d"], -2.0), (None, ["e"], -1.0)])
    rows = step_label_examples([r], size=2, with_expert=False)
    assert [(x["chunk"][-1][0], x["label"], x["index"], x["t"]) for x in rows] == [
        ("b", 0.0, 0, 0), ("a", 1.0, 1, 0), ("d", 0.0, 0, 1)]
    train = step_label_examples([r], size=2, with_expert=True)
    assert [(x["chunk"][-1][0], x["label"], x["index"]) for x in train][-1] == ("c", 1.0, -1)
    with pytest.raises(ValueError, match="train games only"):
        training_examples([_label_record("g", "valid_seen", [("a", ["a"], -1.0)])], size=2)
    s = summarize_games([r])
    assert s["labelled_steps"] == 2 and s["greedy_is_expert"]["successes"] == 0
    assert s["some_candidate_is_expert"]["successes"] == 1 and s["steps_with_several_candidates"] == 1


def test_rules_pick_and_margin_choice():
    step = {"game": "g", "label": [0, 1, 0], "loglik": [-1.0, -2.0, -0.5], "draws": [3, 1, 1],
            "score": [0.50, 0.58, 0.40]}
    assert pick(step, "greedy") == 0 and pick(step, "loglik") == 2 and pick(step, "draws") == 0
    assert pick(step, "assessor") == 1
    assert pick(step, "assessor_margin", 0.05) == 1 and pick(step, "assessor_margin", 0.1) == 0
    with pytest.raises(ValueError, match="rule: expected one of"):
        pick(step, "nosuch")
    rows = [{"game": "g", "t": 0, "index": i, "label": float(y), "loglik": ll, "draws": d}
            for i, (y, ll, d) in enumerate(zip(step["label"], step["loglik"], step["draws"]))]
    margin, acc = choose_margin(rows, np.asarray(step["score"]), (0.0, 0.05, 0.1))
    assert margin == 0.05 and acc == {0.0: 1.0, 0.05: 1.0, 0.1: 0.0}


def test_ranking_counts_contested_steps_and_pairs_rules_over_games():
    rows, scores = [], []
    for g in range(6):  # in every game: one contested step the assessor gets right, one single-candidate step
        for i, y in enumerate((0, 1)):
            rows.append({"game": f"g{g}", "t": 0, "index": i, "label": float(y), "loglik": -float(i), "draws": 1})
            scores.append(0.3 + 0.4 * y)
        rows.append({"game": f"g{g}", "t": 1, "index": 0, "label": 1.0, "loglik": -1.0, "draws": 1})
        scores.append(0.9)
    r = ranking(rows, np.asarray(scores), margin=0.1, resamples=200)
    c = r["contested"]
    assert c["steps"] == 6 and c["games"] == 6 and c["random"] == pytest.approx(0.5)
    assert c["greedy"]["successes"] == 0 and c["assessor"]["successes"] == 6 and c["assessor_margin"]["successes"] == 6
    assert c["versus_greedy"]["assessor"]["diff"] == pytest.approx(1.0)
    assert r["all"]["steps"] == 12 and r["all"]["greedy"]["successes"] == 6


def test_step_assessor_run_end_to_end_on_small_collections(tmp_path):
    """Train on DAgger-shaped records, tune and report on step-label folders: the outputs exist, every
    rule and trivial predictor is measured, and a report game that is also a training game is refused."""
    def write(folder: Path, recs: list[dict]) -> Path:
        (folder / "games").mkdir(parents=True)
        for r in recs:
            (folder / "games" / f"{r.get('game') or r['id'].rsplit('/', 1)[-1]}.json").write_text(json.dumps(r))
        return folder

    train = write(tmp_path / "dagger", [_dagger_record(f"t{i}") for i in range(4)])
    mk = lambda split, i: _label_record(f"{split}{i}", split, [("open fridge 1", ["go to sinkbasin 1", "open fridge 1"], -1.0),
                                                             ("go to fridge 1", ["go to fridge 1"], -0.5)])
    tune = write(tmp_path / "tune", [mk("valid_seen", i) for i in range(3)])
    report = write(tmp_path / "report", [mk("valid_train", i) for i in range(6)])
    cfg = StepAssessorConfig(epochs=2, folds=2, resamples=200, margins=(0.0, 0.1))
    from alfworld_helpers import shared_encoder

    res = run_step_assessor([train], [tune], [report], tmp_path / "out", cfg, encoder=shared_encoder())
    assert res["train_examples"] == 12 and res["train_games"] == 4 and res["margin"] in (0.0, 0.1)
    assert res["ranking"]["contested"]["steps"] == 6 and res["ranking"]["all"]["steps"] == 12
    preds = res["assessor"]["predictors"]
    assert {"step M_sa", "step M_sa + actor signals", "position", "actor loglik", "draws", "greedy", "task type",
            "combination"} <= set(preds)
    for f in ("step_assessor.json", "summary.md", "reliability.png", "scorer/config.json"):
        assert (tmp_path / "out" / f).is_file(), f
    assert "Candidate picked = the expert's command" in (tmp_path / "out" / "summary.md").read_text()
    leak = write(tmp_path / "leak", [_label_record("t1", "valid_train", [("a", ["a", "b"], -1.0)])])
    with pytest.raises(ValueError, match="also in the training folders"):
        run_step_assessor([train], [tune], [leak], tmp_path / "out2", cfg, encoder=shared_encoder())
