"""The fine-tuned actor's scorer from its own recorded episodes (metacog_fast.alfworld.finetune.scorer), on the
committed evaluation records of the shipped actor (results/finetune/eval_rr1200_final_60)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from metacog_fast.alfworld.finetune.scorer import ScorerFitConfig, _fold_of, crossval, fit_scorer, load_episodes

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "results" / "finetune" / "eval_rr1200_final_60"
SHIPPED = ROOT / "metacog_fast" / "llm" / "finetuned" / "alfworld" / "scorer"


@pytest.fixture(scope="module")
def records():
    if not RECORDS.is_dir():
        pytest.skip(f"{RECORDS} not in this checkout")
    return load_episodes([RECORDS])


def _subset(records, won: int, lost: int):
    w = [r for r in records if r["won"]][:won]
    lo = [r for r in records if not r["won"]][:lost]
    return w + lo


def test_load_episodes_reads_every_record(records):
    assert len(records) == 60
    assert sum(bool(r["won"]) for r in records) == 19  # the shipped actor's evaluation (model.json)
    assert all(r["pairs"] and r["source"] == str(RECORDS) for r in records)


def test_crossval_holds_out_whole_games_and_reports_counts(records):
    sub = _subset(records, 8, 8)
    cfg = ScorerFitConfig(epochs=3, folds=2, resamples=200)
    cv = crossval(sub, cfg)
    assert cv["episodes"] == 16 and cv["won_episodes"] == 8 and cv["folds"] == 2
    a = cv["chunk_auroc2"]
    assert a["defined"] and a["positives"] == 8 and a["negatives"] == 8
    assert 0.0 <= a["low"] <= a["value"] <= a["high"] <= 1.0
    # folds are a function of the game alone: both folds are used, and a game never straddles them
    folds = {r["game"]: _fold_of(r["game"], 2, 0) for r in sub}
    assert set(folds.values()) == {0, 1}


def test_crossval_is_undefined_below_five_positive_episodes(records):
    cv = crossval(_subset(records, 4, 10), ScorerFitConfig(epochs=2, folds=2, resamples=200))
    assert not cv["chunk_auroc2"]["defined"] and cv["chunk_auroc2"]["value"] is None
    assert "positives = 4 < 5" in cv["chunk_auroc2"]["reason"]
    assert cv["chunk_auroc2_text"].startswith("undefined")


def test_fit_scorer_writes_a_loadable_scorer(records, tmp_path):
    from metacog_fast.scoring import TrajectoryScorer

    rep = fit_scorer(_subset(records, 3, 3), tmp_path / "s", ScorerFitConfig(epochs=2), check=False)
    assert rep["trained_on"]["episodes"] == 6 and rep["trained_on"]["won_episodes"] == 3
    s = TrajectoryScorer.load(tmp_path / "s")
    r = records[0]
    p = s.score(r["task"], r.get("plan", ""), [r["pairs"][:4]])
    assert p.shape == (1,) and 0.0 <= float(p[0]) <= 1.0
    assert json.loads((tmp_path / "s" / "scorer.json").read_text())["config"]["epochs"] == 2


def test_bad_input_names_the_argument(records, tmp_path):
    with pytest.raises(FileNotFoundError, match="dirs:"):
        load_episodes([tmp_path])
    with pytest.raises(ValueError, match="records: need won and lost"):
        fit_scorer([r for r in records if r["won"]][:3], tmp_path / "x", check=False)
    with pytest.raises(ValueError, match="folds:"):
        crossval(records[:4], ScorerFitConfig(folds=1))


def test_shipped_scorer_matches_its_record():
    """The scorer that ships beside the actor: its record was computed on held-out games, and the
    folder loads."""
    if not (SHIPPED / "scorer.json").is_file():
        pytest.skip("no shipped scorer")
    rep = json.loads((SHIPPED / "scorer.json").read_text())
    cv = rep["crossval"]
    assert cv["games"] == rep["trained_on"]["games"] and cv["episodes"] == rep["trained_on"]["episodes"]
    a = cv["chunk_auroc2"]
    assert a["defined"] and a["positives"] >= 5 and np.isfinite(a["value"])


def test_cli_scorer_command(records, tmp_path, capsys):
    """`metacog finetune scorer`: flags from ScorerFitConfig; a folder without records is an exit-2
    error naming the argument; a small real fit writes the scorer and prints its AUROC2."""
    from metacog_fast.cli.main import main

    assert main(["finetune", "scorer", "--episodes", str(tmp_path), "--out", str(tmp_path / "s")]) == 2
    assert "dirs:" in capsys.readouterr().err
    src = tmp_path / "few" / "episodes"
    for r in _subset(records, 6, 6):
        d = src / r["game"]
        d.mkdir(parents=True)
        (d / "test_0.json").write_text(json.dumps({k: v for k, v in r.items() if k != "source"}))
    rc = main(["finetune", "scorer", "--episodes", str(tmp_path / "few"), "--out", str(tmp_path / "s"),
               "--epochs", "2", "--folds", "2", "--resamples", "200", "--shape", "episode"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["trained_on"]["episodes"] == 12 and out["chunk_auroc2"].endswith("(6+/6- ep)")
    assert json.loads((tmp_path / "s" / "scorer.json").read_text())["config"]["shape"] == "episode"
