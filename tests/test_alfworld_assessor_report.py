"""``metacog report alfworld-assessor`` on a real run folder: 18 games (3 per task type) of run 3's
MUSE-random records (results/alfworld/run3/records/muse-random.tar.gz), checked for its fields and
against report.py's AUROC2 of the same chunks."""
from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from metacog_fast.alfworld.assessor_report import (
    ADAPT_WIN,
    LOGPROB,
    POSITION,
    TYPE_PRIOR,
    assessor_report,
    assessor_rows,
)
from metacog_fast.alfworld.report import complete_games, load_run, summarize

ROOT = Path(__file__).resolve().parents[1]
TARBALL = ROOT / "results" / "alfworld" / "run3" / "records" / "muse-random.tar.gz"
PER_TYPE = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A run folder with run 3's MUSE-random config and the records of its first 3 games of each type."""
    if not TARBALL.exists():
        pytest.skip(f"{TARBALL} is not in this checkout")
    base = tmp_path_factory.mktemp("run3")
    with tarfile.open(TARBALL, "r:gz") as tar:
        cfg = json.load(tar.extractfile("muse-random/config.json"))
        keep: dict[str, list[str]] = {}
        for g in cfg["games"]:
            keep.setdefault(g["task_type"], [])
            if len(keep[g["task_type"]]) < PER_TYPE:
                keep[g["task_type"]].append(g["game"])
        games = {g for v in keep.values() for g in v}
        members = [m for m in tar.getmembers() if m.name == "muse-random/config.json"
                   or (m.isfile() and m.name.split("/")[2:3] and m.name.split("/")[2] in games)]
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.10.12 / 3.11.4
        tar.extractall(base, members=members, **safe)
    return base / "muse-random"


@pytest.fixture(scope="module")
def result(run: Path, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("assessor")
    return out, assessor_report(run, out)  # 10,000 resamples, seed 0: report.py's intervals


def test_the_chunk_table_is_report_pys_chunks(run: Path):
    rows = assessor_rows(run)
    cfg, recs = load_run(run)
    recs, _ = complete_games(recs, cfg["config"]["test_episodes"])
    s = summarize(recs, "test", adapted=True)
    assert rows.label == "muse-random" and rows.facts["games"] == 6 * PER_TYPE
    assert len(rows.outcome) == s["chunks_adaptation"] == s["chunks_no_adaptation"] == rows.facts["chunks"]
    test = [r for r in recs if r["phase"] == "test"]
    assert rows.assessors["adaptation"] == [p for r in test for p in r["chunk_probs"]]
    assert rows.assessors["no_adaptation"] == [p for r in test for p in r["chunk_probs_pre"]]
    # positions restart at 0 in every episode; the step fraction is the first step over the 50-step budget
    starts = [i for i, k in enumerate(rows.chunk_index) if k == 0]
    assert len(starts) == len(test) == len(set(rows.episode))
    np.testing.assert_allclose(rows.step_fraction, np.array(rows.chunk_index) * 4 / 50)
    # the game's adaptation win rate: 2 adaptation episodes, so 0, 1/2 or 1, the same for a game's rows
    assert set(rows.adapt_win_rate) <= {0.0, 0.5, 1.0}
    by_game = {}
    for g, w in zip(rows.game, rows.adapt_win_rate):
        assert by_game.setdefault(g, w) == w
    adapt = {}
    for r in recs:
        if r["phase"] == "adapt":
            adapt.setdefault(r["game"], []).append(float(r["won"]))
    assert by_game == {g: float(np.mean(v)) for g, v in adapt.items()}
    assert rows.actor_logprob is None and LOGPROB in rows.missing  # run 3 recorded none


def test_the_report_has_every_predictor_and_agrees_with_report_py(run: Path, result):
    out, res = result
    r = res["muse-random"]
    assert set(r["predictors"]) == {"M_sa adaptation", "M_sa no_adaptation", POSITION, ADAPT_WIN, TYPE_PRIOR,
                                    "combination"}
    assert r["predictors"]["combination"]["features"] == [POSITION, ADAPT_WIN, TYPE_PRIOR]
    cfg, recs = load_run(run)
    recs, _ = complete_games(recs, cfg["config"]["test_episodes"])
    s = summarize(recs, "test", adapted=True)
    for name in ("adaptation", "no_adaptation"):
        assert r["predictors"][f"M_sa {name}"]["auroc2"] == s[f"auroc2_{name}_ci"]  # value, interval, counts
    assert r["best_trivial"] in r["predictors"] and r["predictors"][r["best_trivial"]]["kind"] != "assessor"
    best = r["predictors"][r["best_trivial"]]["auroc2"]["value"]
    for name in ("adaptation", "no_adaptation"):
        c = r["comparisons"][f"M_sa {name}"]
        assert c["baseline"] == r["best_trivial"] and c["clusters"] == "games" and c["n_clusters"] == 18
        assert c["diff"] == pytest.approx(r["predictors"][f"M_sa {name}"]["auroc2"]["value"] - best)
        assert c["verdict"] == ("beats" if c["low"] > 0 else "worse" if c["high"] < 0 else "not shown")
    assert r["position_buckets"] == ["0", "1", "2", "3-4", ">= 5"]
    assert r["predictors"][POSITION]["by_position"]["0"]["value"] == pytest.approx(0.5)  # one position: no information
    assert set(r["fold_of_game"].values()) == set(range(5))
    assert LOGPROB in r["missing_signals"]
    saved = json.loads((out / "assessor.json").read_text())
    assert saved["muse-random"]["comparisons"] == r["comparisons"]
    md = (out / "assessor.md").read_text()
    assert "## muse-random" in md and "not measured: actor log-probability" in md and "verdict" in md
    for kind in ("reliability", "auroc2_by_position"):
        assert r["plots"][kind] == f"{kind}_muse-random.png"
        assert (out / r["plots"][kind]).read_bytes()[:4] == b"\x89PNG"


def test_the_command_line_writes_and_prints_the_tables(run: Path, tmp_path, capsys):
    from metacog_fast.cli.main import main

    assert main(["report", "alfworld-assessor", str(run), "--out", str(tmp_path), "--resamples", "200"]) == 0
    assert "## muse-random" in capsys.readouterr().out
    assert (tmp_path / "assessor.json").exists()
    assert main(["report", "alfworld-assessor", str(run), "--out", str(tmp_path), "--folds", "1"]) == 2
    assert "--folds: expected an int >= 2" in capsys.readouterr().err


def test_a_folder_without_m_sa_or_with_broken_records_is_an_error(run: Path, tmp_path, capsys):
    from metacog_fast.cli.main import main

    plain = tmp_path / "react"
    shutil.copytree(run, plain)
    for p in plain.glob("episodes/*/*.json"):
        rec = json.loads(p.read_text())
        rec.pop("chunk_probs", None)
        rec.pop("chunk_probs_pre", None)
        p.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="run: no run with M_sa"):
        assessor_report(plain, tmp_path / "o1", resamples=100)
    assert main(["report", "alfworld-assessor", str(plain), "--out", str(tmp_path / "o2")]) == 2
    assert "run: no run with M_sa" in capsys.readouterr().err
    broken = tmp_path / "broken"
    shutil.copytree(run, broken)
    p = sorted(broken.glob("episodes/*/test_0.json"))[0]
    rec = json.loads(p.read_text())
    rec["chunk_probs"] = rec["chunk_probs"][:-1] + [0.5, 0.5]
    p.write_text(json.dumps(rec))
    with pytest.raises(ValueError, match="chunk_probs has"):
        assessor_rows(broken)
