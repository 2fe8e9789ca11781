"""Metrics against hand-computed cases and sklearn; bad input gives clear errors."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from metacog_fast.metrics import (
    auroc2,
    average_ranks,
    mean_steps_charged,
    mean_steps_to_success,
    metacognitive_accuracy,
    plot_task_bars,
    plot_type2_roc,
    quantile_labels,
    success_rate,
    tasks_solved,
    type2_roc,
)


def test_auroc_hand_computed():
    # positives 0.8, 0.4; negatives 0.5, 0.1: pairs (0.8>0.5, 0.8>0.1, 0.4<0.5, 0.4>0.1) -> 3/4
    assert auroc2([0.8, 0.5, 0.4, 0.1], [1, 0, 1, 0]) == pytest.approx(0.75)
    assert auroc2([0.9, 0.1], [1, 0]) == 1.0
    assert auroc2([0.1, 0.9], [1, 0]) == 0.0


def test_auroc_ties_count_half():
    # one tie between a positive and a negative: 0.5 of a pair
    assert auroc2([0.5, 0.5], [1, 0]) == pytest.approx(0.5)
    # pos {0.7, 0.5}, neg {0.5, 0.2}: 1 + 1 + 0.5 + 1 = 3.5 / 4
    assert auroc2([0.7, 0.5, 0.5, 0.2], [1, 1, 0, 0]) == pytest.approx(0.875)


def test_average_ranks():
    np.testing.assert_allclose(average_ranks(np.array([3.0, 1.0, 3.0, 2.0])), [3.5, 1.0, 3.5, 2.0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_and_roc_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 300)
    y[:2] = [0, 1]
    s = np.round(rng.normal(size=300) + y, 1)  # rounding creates many ties
    assert auroc2(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    fpr, tpr, thr = type2_roc(s, y)
    f2, t2, th2 = roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, f2)
    np.testing.assert_allclose(tpr, t2)
    np.testing.assert_allclose(thr[1:], th2[1:])
    assert np.isinf(thr[0])


def test_metacognitive_accuracy():
    assert metacognitive_accuracy([0.9, 0.2, 0.5, 0.49], [1, 0, 1, 1]) == pytest.approx(0.75)
    # quantile-wise [steps, N]
    p = np.array([[0.9, 0.9], [0.1, 0.6]])
    c = np.array([[1, 1], [0, 0]])
    assert metacognitive_accuracy(p, c) == pytest.approx(0.75)
    assert metacognitive_accuracy([0.3], [1], threshold=0.25) == 1.0


def test_quantile_labels():
    np.testing.assert_array_equal(quantile_labels(100, 500), [1, 1, 1, 1, 1])
    np.testing.assert_array_equal(quantile_labels(101, 500), [0, 1, 1, 1, 1])
    np.testing.assert_array_equal(quantile_labels(500, 500), [0, 0, 0, 0, 1])
    np.testing.assert_array_equal(quantile_labels(None, 500), [0, 0, 0, 0, 0])
    np.testing.assert_array_equal(quantile_labels(-1, 500, N=3), [0, 0, 0])
    lab = quantile_labels(250, 500, steps=7)
    assert lab.shape == (7, 5)
    np.testing.assert_array_equal(lab[3], [0, 0, 1, 1, 1])


def test_outcome_metrics():
    y = [1, 0, 0, 1, 0, 0]
    tasks = ["a", "a", "b", "b", "c", "c"]
    assert success_rate(y) == pytest.approx(2 / 6)
    assert success_rate(y, tasks) == pytest.approx((0.5 + 0.5 + 0.0) / 3)
    assert tasks_solved(y, tasks) == 2
    assert mean_steps_to_success([10, 50, 50, 20, 50, 50], y) == pytest.approx(15.0)
    assert np.isnan(mean_steps_to_success([10, 20], [0, 0]))
    assert mean_steps_charged([10, 50, 50, 20, 50, 50], y) == pytest.approx((10 + 20 + 400) / 6)


@pytest.mark.parametrize(
    "signal,outcome,match",
    [
        ([], [], "empty"),
        ([0.1, 0.2], [1], "match"),
        ([0.1, float("nan")], [1, 0], "NaN"),
        ([0.1, 0.2], [1, 1], "both classes"),
        ([0.1, 0.2], [1, 2], "binary"),
    ],
)
def test_auroc_bad_input(signal, outcome, match):
    with pytest.raises(ValueError, match=match):
        auroc2(signal, outcome)


def test_other_bad_input():
    with pytest.raises(ValueError, match="probabilities"):
        metacognitive_accuracy([1.5], [1])
    with pytest.raises(ValueError, match="T_max"):
        quantile_labels(3, 0)
    with pytest.raises(ValueError, match="tasks"):
        success_rate([1, 0], ["a"])
    with pytest.raises(TypeError, match="signal"):
        auroc2(["x", "y"], [0, 1])
    with pytest.raises(ValueError, match="values"):
        plot_task_bars({}, "/tmp/never.png")


def test_plots_write_png(tmp_path):
    out = plot_type2_roc([0.9, 0.2, 0.6, 0.4], [1, 0, 1, 0], tmp_path / "sub" / "roc.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out2 = plot_task_bars({"pick": 0.5, "clean": 1.0}, tmp_path / "bars.png")
    assert out2.stat().st_size > 1000
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["bars.png", "roc.png", "sub"]
