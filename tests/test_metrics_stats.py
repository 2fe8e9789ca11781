"""Statistics that tell agents apart (docs/statistics.md): Wilson intervals at published values,
the paired bootstrap's p-value at known answers, AUROC2 with a cluster bootstrap over episodes
(rank formula, 5-episode rule, episodes kept together), AUROC2 within task type, bad input."""
from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from metacog_fast.metrics import (
    auroc2,
    auroc2_clustered,
    auroc2_within_types,
    compare_paired,
    format_p,
    paired_bootstrap,
    plot_rates_with_intervals,
    plot_type2_roc,
    success_interval,
    wilson_interval,
)
from metacog_fast.metrics.clustered import _episode_kinds, replicate_auroc2
from metacog_fast.metrics.resample import stratified_counts

Z = NormalDist().inv_cdf(0.975)


# ---------------------------------------------------------------- Wilson

@pytest.mark.parametrize("k,n,lo,hi", [
    # Newcombe (1998), Stat. Med. 17:857, Table II, method 3 (score interval without correction)
    (81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)])
def test_wilson_published_values(k, n, lo, hi):
    got = wilson_interval(k, n)
    assert got == (pytest.approx(lo, abs=5e-5), pytest.approx(hi, abs=5e-5))


@pytest.mark.parametrize("n", [1, 7, 60, 500])
def test_wilson_ends_are_exact(n):
    # k = 0: [0, z^2/(n+z^2)]; k = n: [n/(n+z^2), 1]; the interval never leaves [0, 1]
    assert wilson_interval(0, n) == (0.0, pytest.approx(Z * Z / (n + Z * Z), rel=1e-12))
    assert wilson_interval(n, n) == (pytest.approx(n / (n + Z * Z), rel=1e-12), 1.0)
    for k in range(0, n + 1, max(1, n // 7)):
        lo, hi = wilson_interval(k, n)
        assert 0.0 <= lo <= k / n <= hi <= 1.0


def test_success_interval_dataclass():
    r = success_interval([True] * 25 + [False] * 35)
    assert (r.successes, r.n, r.rate) == (25, 60, 25 / 60)
    assert (r.low, r.high) == wilson_interval(25, 60)
    assert r.text() == f"42% [{100 * r.low:.0f}%, {100 * r.high:.0f}%] (25/60)"
    assert json.loads(json.dumps(r.to_dict()))["n"] == 60
    with pytest.raises(ValueError, match="outcomes"):
        success_interval([1, 2])
    with pytest.raises(ValueError, match="confidence"):
        success_interval([1, 0], confidence=1.5)


# ---------------------------------------------------------------- paired bootstrap

def test_paired_identical_inputs_give_p_one():
    x = np.random.default_rng(0).random(40)
    r = paired_bootstrap(x, x)
    assert (r["diff"], r["low"], r["high"], r["p_value"]) == (0.0, 0.0, 0.0, 1.0)


def test_paired_large_consistent_difference_gives_p_zero():
    rng = np.random.default_rng(1)
    b = rng.random(60)
    r = paired_bootstrap(b + 0.5 + 0.05 * rng.random(60), b)
    assert r["p_value"] == 0.0 and r["low"] > 0.5
    assert format_p(r["p_value"], 10000) == "p < 1e-04"


def test_paired_p_matches_the_normal_test_for_a_large_sample():
    # n = 400 differences: the bootstrap distribution of the mean is close to normal, so the
    # p-value is close to the two-sided z-test's
    rng = np.random.default_rng(2)
    d = rng.normal(0.1, 1.0, 400)
    z = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))
    want = 2 * (1 - NormalDist().cdf(abs(z)))
    r = paired_bootstrap(d, np.zeros_like(d), resamples=20000)
    assert 0.01 < want < 0.2
    assert r["p_value"] == pytest.approx(want, abs=0.015)
    # the interval and the p-value agree: 95 % interval excludes 0 iff p < 0.05
    assert (r["low"] > 0 or r["high"] < 0) == (r["p_value"] < 0.05)


def test_paired_bootstrap_is_deterministic_and_seeded():
    rng = np.random.default_rng(3)
    a, b = rng.random(30), rng.random(30)
    assert paired_bootstrap(a, b, seed=5) == paired_bootstrap(a, b, seed=5)
    assert paired_bootstrap(a, b, seed=5)["low"] != paired_bootstrap(a, b, seed=6)["low"]


def test_compare_paired_pairs_by_id():
    a = {f"g{i}": float(i % 2) for i in range(20)}
    b = {f"g{i}": 0.0 for i in range(20)}
    b["extra"] = 1.0
    r = compare_paired(a, b)
    assert r.defined and r.n == 20 and r.only_b == 1 and r.only_a == 0
    assert r.diff == pytest.approx(0.5) and r.a_mean == pytest.approx(0.5) and r.b_mean == 0.0
    # the order of the mappings does not matter
    r2 = compare_paired(dict(reversed(list(a.items()))), b)
    assert r2 == r
    assert "p < 1e-04" in r.text() or "p = " in r.text()
    assert json.loads(json.dumps(r.to_dict()))["n"] == 20
    und = compare_paired({"x": 1.0}, {"x": 0.0, "y": 1.0})
    assert not und.defined and und.diff is None and "1 common units < 2" in und.reason
    assert und.text().startswith("undefined")


@pytest.mark.parametrize("kwargs,match", [
    ({"a": [1, 2], "b": [1]}, "b"), ({"a": [1], "b": [1]}, "a, b"), ({"a": [1, 2], "b": [1, float("nan")]}, "b"),
    ({"a": [1, 2], "b": [2, 1], "resamples": 5}, "resamples"), ({"a": [1, 2], "b": [2, 1], "seed": -1}, "seed"),
    ({"a": [1, 2], "b": [2, 1], "confidence": 0}, "confidence")])
def test_paired_bootstrap_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        paired_bootstrap(**kwargs)


def test_compare_paired_bad_input():
    with pytest.raises(TypeError, match="a: expected a mapping"):
        compare_paired([1.0, 2.0], {"x": 1.0})
    with pytest.raises(ValueError, match="resamples"):
        compare_paired({"x": 1.0}, {"x": 1.0}, resamples=10)


# ---------------------------------------------------------------- AUROC2, cluster bootstrap

def _episodes(E: int, L: int, seed: int, p_win: float = 0.4):
    rng = np.random.default_rng(seed)
    won = rng.random(E) < p_win
    won[:5], won[5:10] = True, False
    ep = np.repeat(np.arange(E), L)
    y = won[ep].astype(np.int64)
    s = np.round(0.6 * rng.normal(size=E)[ep] + 0.4 * rng.normal(size=E * L) + 0.8 * y, 1)  # ties
    return s, y, ep


@pytest.mark.parametrize("seed", [0, 1])
def test_clustered_value_is_the_rank_formula(seed):
    s, y, ep = _episodes(40, 7, seed)
    r = auroc2_clustered(s, y, ep.tolist())
    assert r.defined and r.reason is None
    assert r.value == pytest.approx(auroc2(s, y), abs=1e-12)
    assert r.value == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert r.low < r.value < r.high
    assert r.positives == len(set(ep[y == 1])) and r.negatives == len(set(ep[y == 0])) and r.rows == s.size
    d = json.loads(json.dumps(r.to_dict()))
    assert d["positives"] == r.positives and d["defined"] is True


def test_replicates_equal_explicitly_resampled_data():
    # each replicate from the pair matrix equals the AUROC2 of the data rebuilt from the drawn episodes
    s, y, ep = _episodes(25, 4, 3)
    E = 25
    _, _, kind = _episode_kinds(y, ep, E)
    counts = stratified_counts(kind, 100, 11)
    reps = replicate_auroc2(s, y, ep, counts)
    for b in range(0, 100, 9):
        take = np.concatenate([np.flatnonzero(ep == e) for e in range(E) for _ in range(int(counts[b, e]))])
        assert reps[b] == pytest.approx(auroc2(s[take], y[take]), abs=1e-12)
    # stratified: every resample holds as many successful episodes as the data
    assert np.all(counts[:, kind == 0].sum(axis=1) == (kind == 0).sum())


def test_undefined_below_five_episodes():
    s, y, ep = _episodes(30, 5, 4)
    # keep 4 successful episodes only
    pos_eps = sorted(set(ep[y == 1]))
    keep = ~np.isin(ep, pos_eps[4:])
    r = auroc2_clustered(s[keep], y[keep], ep[keep].tolist())
    assert not r.defined and r.value is None and r.low is None and r.high is None
    assert r.positives == 4 and r.reason == "n positives = 4 < 5"
    assert r.text() == "undefined (n positives = 4 < 5)"
    keep5 = ~np.isin(ep, pos_eps[5:])
    assert auroc2_clustered(s[keep5], y[keep5], ep[keep5].tolist()).defined
    # many chunks of one successful episode do not make it defined (the committed records' case)
    one = np.isin(ep, pos_eps[:1]) | (y == 0)
    r1 = auroc2_clustered(s[one], y[one], ep[one].tolist())
    assert not r1.defined and r1.positives == 1 and "n positives = 1 < 5" in r1.reason


def test_cluster_bootstrap_keeps_episodes_together():
    s, y, ep = _episodes(60, 3, 5)
    base = auroc2_clustered(s, y, ep.tolist())
    # every chunk duplicated 10 times inside its own episode: no new information
    s10, y10, ep10 = np.repeat(s, 10), np.repeat(y, 10), np.repeat(ep, 10)
    dup = auroc2_clustered(s10, y10, ep10.tolist())
    assert dup.value == pytest.approx(base.value, abs=1e-12)
    assert (dup.low, dup.high) == (pytest.approx(base.low, abs=1e-12), pytest.approx(base.high, abs=1e-12))
    # an i.i.d. bootstrap (each chunk its own unit) would shrink by about sqrt(10)
    iid = auroc2_clustered(s10, y10, list(range(s10.size)))
    assert (iid.high - iid.low) < 0.5 * (dup.high - dup.low)


def test_clustered_is_deterministic():
    s, y, ep = _episodes(30, 4, 6)
    assert auroc2_clustered(s, y, ep.tolist(), seed=3) == auroc2_clustered(s, y, ep.tolist(), seed=3)
    ids = [f"game-{e}" for e in ep]  # any hashable ids
    assert auroc2_clustered(s, y, ids, seed=3).low == auroc2_clustered(s, y, ep.tolist(), seed=3).low


def test_within_type_ignores_base_rates():
    # type A succeeds 80 %, type B 20 %; the signal knows only the type: over all rows it looks
    # informative, within a type it is chance
    rng = np.random.default_rng(7)
    rows = []
    for e in range(80):
        t = "A" if e < 40 else "B"
        won = rng.random() < (0.8 if t == "A" else 0.2)
        won = True if e in (0, 1, 40, 41, 42) else (False if e in (2, 3, 4, 5, 6, 43) else won)
        for _ in range(3):
            rows.append((1.0 if t == "A" else 0.0, int(won), e, t))
    s, y, ep, ty = (np.array([r[i] for r in rows]) for i in range(4))
    overall = auroc2_clustered(s, y, ep.tolist())
    by = auroc2_within_types(s, y, ep.tolist(), ty.tolist())
    assert overall.value > 0.7
    assert by.pooled.value == 0.5 and by.per_type["A"].value == 0.5 and by.per_type["B"].value == 0.5
    assert by.contributing_types == ["A", "B"]
    assert json.loads(json.dumps(by.to_dict()))["pooled"]["value"] == 0.5


def test_within_type_is_the_pair_weighted_average():
    s, y, ep = _episodes(90, 4, 9)
    ty = np.array(["x", "y", "z"])[ep % 3]
    by = auroc2_within_types(s, y, ep.tolist(), ty.tolist())
    pairs, acc = 0.0, 0.0
    for t in "xyz":
        m = ty == t
        r = by.per_type[t]
        assert r.value == pytest.approx(auroc2(s[m], y[m]), abs=1e-12)
        w = (y[m] == 1).sum() * (y[m] == 0).sum()
        pairs, acc = pairs + w, acc + w * r.value
    assert by.pooled.value == pytest.approx(acc / pairs, abs=1e-12)
    assert by.pooled.low < by.pooled.value < by.pooled.high
    assert by.pooled.positives == by.per_type["x"].positives + by.per_type["y"].positives + by.per_type["z"].positives


def test_within_type_undefined_and_single_class_types():
    s, y, ep = _episodes(30, 2, 10)
    ty = np.where(ep < 20, "big", "allwon")
    y = np.where(ep >= 20, 1, y)  # type "allwon" has no failure: it contributes no pairs
    by = auroc2_within_types(s, y, ep.tolist(), ty.tolist())
    assert by.contributing_types == ["big"]
    assert not by.per_type["allwon"].defined and "n negatives = 0 < 5" in by.per_type["allwon"].reason
    few = auroc2_within_types(s[:12], y[:12], ep[:12].tolist(), ty[:12].tolist())
    assert not few.pooled.defined and few.pooled.value is None


@pytest.mark.parametrize("kwargs,match", [
    ({"episodes": [0, 1]}, "episodes: expected 6 ids"),
    ({"outcome": [0, 1, 2, 0, 1, 0]}, "outcome"),
    ({"signal": [0.1, 0.2, float("inf"), 0, 0, 0]}, "signal"),
    ({"resamples": 10}, "resamples"), ({"seed": 1.5}, "seed"), ({"confidence": 2}, "confidence"),
    ({"min_episodes": 0}, "min_episodes")])
def test_clustered_bad_input(kwargs, match):
    args = {"signal": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], "outcome": [0, 1, 0, 1, 0, 1], "episodes": [0, 0, 1, 1, 2, 2]}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        auroc2_clustered(**args)


def test_within_type_rejects_two_types_in_one_episode():
    with pytest.raises(ValueError, match="types: expected one task type per episode"):
        auroc2_within_types([0.1, 0.2, 0.3], [1, 1, 0], [0, 0, 1], ["a", "b", "a"])
    with pytest.raises(ValueError, match="types: expected 3 ids"):
        auroc2_within_types([0.1, 0.2, 0.3], [1, 1, 0], [0, 0, 1], ["a"])
    with pytest.raises(TypeError, match="episodes: ids must be hashable"):
        auroc2_clustered([0.1, 0.2], [1, 0], [{}, {}])


# ---------------------------------------------------------------- plots

def test_plots_show_intervals(tmp_path):
    a, b = success_interval([1, 0, 1, 1]), success_interval([0, 0, 1, 0])
    out = plot_rates_with_intervals({"react": {"pick": a, "clean": b}, "muse": {"pick": b.to_dict(), "clean": None}},
                                    tmp_path / "rates.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="groups"):
        plot_rates_with_intervals({"x": {"t": {"rate": 0.5}}}, tmp_path / "bad.png")
    with pytest.raises(ValueError, match="groups"):
        plot_rates_with_intervals({}, tmp_path / "bad.png")
    s, y, ep = _episodes(30, 3, 12)
    r = auroc2_clustered(s, y, ep.tolist())
    assert plot_type2_roc(s, y, tmp_path / "roc.png", result=r).stat().st_size > 1000


def test_mixed_outcome_episodes_and_the_pair_matrix_limit(monkeypatch):
    # rows of one episode may disagree (e.g. per-step labels): replicates still equal rebuilt data
    rng = np.random.default_rng(13)
    E, L = 20, 5
    ep = np.repeat(np.arange(E), L)
    y = (rng.random(E * L) < 0.5).astype(np.int64)
    s = np.round(rng.normal(size=E * L) + y, 1)
    _, _, kind = _episode_kinds(y, ep, E)
    assert (kind == 2).any()
    counts = stratified_counts(kind, 50, 2)
    reps = replicate_auroc2(s, y, ep, counts)
    for b in range(0, 50, 7):
        take = np.concatenate([np.flatnonzero(ep == e) for e in range(E) for _ in range(int(counts[b, e]))])
        assert reps[b] == pytest.approx(auroc2(s[take], y[take]), abs=1e-12)
    import metacog_fast.metrics.clustered as cl

    monkeypatch.setattr(cl, "MAX_PAIR_MATRIX", 100)
    with pytest.raises(ValueError, match=r"episodes: \d+ episodes with a success x \d+ with a failure need a"):
        auroc2_clustered(s, y, ep.tolist())
