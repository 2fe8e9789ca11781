"""metrics/assessor.py: an assessor against cross-fitted trivial predictors, on synthetic data whose
answer is known (docs/scoring.md, "An assessor against trivial predictors")."""
from __future__ import annotations

import numpy as np
import pytest

from metacog_fast.metrics import (
    auroc2,
    auroc2_clustered,
    calibration,
    cross_fitted_trivial,
    evaluate_assessor,
    game_folds,
    paired_auroc2_difference,
    plot_reliability,
)

B = 1000  # resamples: enough for the intervals' side of 0 here, fast


def episodes_data(games: int = 48, seed: int = 0) -> dict[str, np.ndarray]:
    """Chunk rows of ``games`` games x 2 episodes: 6 task types with different success rates,
    failures longer than successes (so the chunk index predicts the outcome), and a per-game skill
    (the game's earlier win rate predicts it too)."""
    rng = np.random.default_rng(seed)
    types = [f"type{g % 6}" for g in range(games)]
    base = {f"type{t}": r for t, r in enumerate((0.2, 0.35, 0.5, 0.5, 0.65, 0.8))}
    rows: dict[str, list] = {k: [] for k in ("y", "ep", "game", "type", "pos", "skill")}
    for g in range(games):
        skill = rng.random()
        p = np.clip(base[types[g]] + 0.4 * (skill - 0.5), 0.02, 0.98)
        for e in range(2):
            won = int(rng.random() < p)
            n = int(rng.integers(1, 4)) if won else int(rng.integers(3, 12))
            for i in range(n):
                rows["y"].append(won)
                rows["ep"].append(f"g{g}#{e}")
                rows["game"].append(f"g{g}")
                rows["type"].append(types[g])
                rows["pos"].append(i)
                rows["skill"].append(round(skill, 1))
    return {k: np.array(v) for k, v in rows.items()}


def test_an_assessor_that_is_position_does_not_beat_position():
    d = episodes_data()
    same = 1.0 / (1.0 + d["pos"])  # a monotone function of position: the same ranking
    noisy = np.clip(same + np.random.default_rng(1).normal(0, 0.01, same.size), 0, 1)
    rep = evaluate_assessor({"same": same, "noisy": noisy}, d["y"], d["ep"].tolist(), d["game"].tolist(),
                            signals={"position": d["pos"]}, position=d["pos"], resamples=B)
    assert rep.best_trivial == "position"
    assert rep.predictors["position"].direction == -1  # learned: later chunks fail
    c = rep.comparisons["same"]
    assert c.diff == pytest.approx(0.0, abs=1e-12) and c.low == pytest.approx(0) and c.high == pytest.approx(0)
    assert c.verdict == "not shown" and c.p_value == 1.0
    assert rep.comparisons["noisy"].verdict != "beats"
    # position's AUROC2 is the signal's own (the direction is all the fold models learn)
    assert rep.predictors["position"].auroc2.value == pytest.approx(auroc2(-d["pos"], d["y"]))
    # within one chunk index position carries nothing
    first = rep.predictors["position"].by_position["0"]
    assert first.value == pytest.approx(0.5)
    assert all(c.verdict != "beats" for c in rep.comparisons_by_position["same"].values())


def test_an_informative_assessor_beats_the_best_trivial_predictor():
    d = episodes_data()
    rng = np.random.default_rng(2)
    informed = 1 / (1 + np.exp(-(3.0 * (2 * d["y"] - 1) + rng.normal(0, 1.5, d["y"].size))))
    rep = evaluate_assessor({"informed": informed}, d["y"], d["ep"].tolist(), d["game"].tolist(),
                            signals={"position": d["pos"], "skill": d["skill"]}, priors={"type": d["type"].tolist()},
                            position=d["pos"], fold_strata=d["type"].tolist(), resamples=B)
    best = rep.predictors[rep.best_trivial].auroc2.value
    assert rep.predictors["informed"].auroc2.value > best
    c = rep.comparisons["informed"]
    assert c.verdict == "beats" and c.low > 0 and c.clusters == "games" and c.n_clusters == 48
    # within the first chunks, position is constant: another trivial predictor is the bar there
    first = rep.comparisons_by_position["informed"]["0"]
    assert first.baseline != "position" and first.verdict == "beats"
    assert set(rep.comparisons_by_position["informed"]) == set(rep.position_buckets)
    assert set(rep.predictors) == {"informed", "position", "skill", "type", "combination"}
    assert rep.predictors["combination"].features == ["position", "skill", "type"]
    # a reversed assessor is "worse"
    rev = paired_auroc2_difference(1 - informed, informed, d["y"], d["game"].tolist(), ("rev", "informed"),
                                   resamples=B)
    assert rev.verdict == "worse" and rev.high < 0


def test_held_out_predictions_never_see_the_held_out_labels():
    """Flip the outcomes of one fold's games: that fold's predictions must not move (they would if a
    prior or a fitted model used them); the other folds' do (so the test can fail)."""
    d = episodes_data(seed=3)
    kw = dict(signals={"position": d["pos"], "skill": d["skill"]}, priors={"type": d["type"].tolist()},
              fold_strata=d["type"].tolist())
    a = cross_fitted_trivial(d["y"], d["ep"].tolist(), d["game"].tolist(), **kw)
    fold0 = np.array([a.fold_of_game[g] == 0 for g in d["game"]])
    y2 = np.where(fold0, 1 - d["y"], d["y"])
    b = cross_fitted_trivial(y2, d["ep"].tolist(), d["game"].tolist(), **kw)
    assert b.fold_of_game == a.fold_of_game
    for name in a.probs:
        np.testing.assert_array_equal(a.probs[name][fold0], b.probs[name][fold0], err_msg=name)
        np.testing.assert_array_equal(a.scores[name][fold0], b.scores[name][fold0], err_msg=name)
        assert not np.array_equal(a.probs[name][~fold0], b.probs[name][~fold0]), name


def test_a_prior_is_the_rate_of_other_games_never_its_own():
    """Keyed by the game itself, a prior knows nothing out of fold: every held-out row gets the
    smoothed base rate of the other folds' episodes (its own game is in none of them)."""
    d = episodes_data(seed=4)
    tp = cross_fitted_trivial(d["y"], d["ep"].tolist(), d["game"].tolist(), priors={"own game": d["game"].tolist()})
    ep_ids, first = np.unique(d["ep"], return_index=True)
    ep_y, ep_game = d["y"][first], d["game"][first]
    ep_fold = np.array([tp.fold_of_game[g] for g in ep_game])
    for f in range(5):
        base = ep_y[ep_fold != f].mean()  # no other episode shares the key: (0 + 2 base) / (0 + 2)
        rows = np.array([tp.fold_of_game[g] == f for g in d["game"]])
        np.testing.assert_allclose(np.abs(tp.scores["own game"][rows]), base)  # value x its fold's sign
    # the in-sample rate of a game's own episodes would be a near-perfect predictor; out of fold it is chance
    leaky = np.array([d["y"][d["game"] == g].mean() for g in d["game"]])
    assert auroc2(leaky, d["y"]) > 0.85
    assert abs(auroc2(tp.probs["own game"], d["y"]) - 0.5) < 0.2


def test_ece_of_a_calibrated_predictor_is_near_zero_and_of_a_biased_one_its_bias():
    rng = np.random.default_rng(5)
    p = rng.random(50_000)
    y = (rng.random(p.size) < p).astype(int)
    eps = (np.arange(p.size) // 10).tolist()  # 5,000 episodes of 10 rows
    cal = calibration(p, y, eps, bins=10, resamples=200)
    assert cal.ece < 0.01  # tolerance: sampling noise of 5,000 rows a bin is ~0.004
    assert sum(b["rows"] for b in cal.per_bin) == p.size and cal.bins == 10
    assert all(abs(b["mean_predicted"] - b["observed"]) < 0.02 for b in cal.per_bin)
    assert cal.low <= cal.ece <= cal.high
    # constant 0.8 against a 50 % success rate: one bin, ECE = |0.8 - 0.5|
    y2 = np.array([0, 1] * 500)
    c2 = calibration(np.full(1000, 0.8), y2, list(range(1000)), resamples=200)
    assert c2.ece == pytest.approx(0.3)
    assert [b["rows"] for b in c2.per_bin][8] == 1000


def test_the_assessors_numbers_are_the_clustered_auroc2_and_buckets_partition_the_rows():
    d = episodes_data(seed=6)
    rng = np.random.default_rng(7)
    s = np.clip(0.5 + 0.3 * (d["y"] - 0.5) + rng.normal(0, 0.2, d["y"].size), 0, 1)
    rep = evaluate_assessor({"s": s}, d["y"], d["ep"].tolist(), d["game"].tolist(), signals={"position": d["pos"]},
                            position=d["pos"], position_edges=(1, 3), resamples=B)
    ref = auroc2_clustered(s, d["y"], d["ep"].tolist(), resamples=B)
    assert rep.predictors["s"].auroc2 == ref
    assert rep.position_buckets == ["0", "1-2", ">= 3"]
    by = rep.predictors["s"].by_position
    assert sum(r.rows for r in by.values()) == d["y"].size
    m = (d["pos"] >= 1) & (d["pos"] < 3)
    assert by["1-2"].value == pytest.approx(auroc2(s[m], d["y"][m]))
    assert rep.to_dict()["comparisons"]["s"]["assessor"] == "s"


def test_game_folds_hold_every_game_once_and_spread_the_strata():
    games = [f"g{i}" for i in range(30)]
    strata = [f"t{i % 3}" for i in range(30)]
    f = game_folds(games, 5, strata, seed=1)
    assert set(f) == set(games) and set(f.values()) == set(range(5))
    sizes = np.bincount(list(f.values()))
    assert sizes.max() - sizes.min() <= 1
    for t in ("t0", "t1", "t2"):
        assert len({f[g] for g, s in zip(games, strata) if s == t}) == 5
    assert game_folds(games, 5, strata, seed=1) == f


@pytest.mark.parametrize("change, arg", [
    (dict(assessors={"a": [2.0] * 6}), "assessors['a']"),
    (dict(assessors={"a": [0.5] * 5}), "assessors['a']"),
    (dict(outcome=[0, 1, 2, 0, 1, 0]), "outcome"),
    (dict(signals={"pos": [0, 1, 2]}), "signals['pos']"),
    (dict(signals={"pos": [0, 1, float("nan"), 0, 1, 0]}), "signals['pos']"),
    (dict(priors={"t": ["a", "b", "a", "a", "b", "b"]}), "priors['t']"),
    (dict(folds=1), "folds"),
    (dict(folds=9), "folds"),
    (dict(bins=0), "bins"),
    (dict(games=["g0", "g0", "g1", "g1", "g1", "g2"]), "games"),
    (dict(fold_strata=["x", "y", "x", "x", "x", "x"]), "fold_strata"),
    (dict(position=[0, 1, 0, 1, 0, 1], position_edges=(2, 1)), "position_edges"),
    (dict(signals={"combination": [0] * 6}), "signals"),
    (dict(assessors={"pos": [0.5] * 6}), "assessors"),
    (dict(assessors={}), "assessors"),
])
def test_bad_input_is_a_value_error_naming_the_argument(change, arg):
    kw = dict(assessors={"a": [0.1, 0.9, 0.2, 0.8, 0.3, 0.7]}, outcome=[0, 1, 0, 1, 0, 1],
              episodes=["e0", "e0", "e1", "e1", "e2", "e2"], games=["g0", "g0", "g1", "g1", "g2", "g2"],
              signals={"pos": [0, 1, 0, 1, 0, 1]}, folds=2, resamples=100)
    kw.update(change)
    with pytest.raises(ValueError, match=arg.replace("[", r"\[").replace("]", r"\]")):
        evaluate_assessor(**kw)


def test_an_assessor_with_too_few_episodes_is_undefined_not_a_verdict():
    d = episodes_data(games=6, seed=8)
    rep = evaluate_assessor({"a": np.full(d["y"].size, 0.5)}, d["y"], d["ep"].tolist(), d["game"].tolist(),
                            signals={"position": d["pos"]}, folds=2, resamples=100, min_episodes=50)
    assert rep.comparisons["a"].verdict == "undefined" and rep.comparisons["a"].diff is None
    assert rep.best_trivial is None


def test_reliability_plot_is_written(tmp_path):
    rng = np.random.default_rng(9)
    p = rng.random(400)
    y = (rng.random(400) < p).astype(int)
    cal = calibration(p, y, list(range(400)), resamples=100)
    out = plot_reliability({"a": cal, "b": cal.to_dict()}, tmp_path / "rel.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="calibrations"):
        plot_reliability({}, tmp_path / "x.png")
