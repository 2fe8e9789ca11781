"""The town ablation's report carries the statistics: Wilson intervals of the rates and every pair
of configurations compared, paired by seed (rebuilt from the committed runs in results/sim)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from metacog_fast.town.evaluation import plot_ablation_statistics
from metacog_fast.town.runner import reaggregate

RUNS = Path(__file__).resolve().parents[1] / "results" / "sim"


def test_reaggregated_ablation_has_intervals_and_paired_comparisons(tmp_path):
    if not (RUNS / "all_run0" / "summary.json").is_file():
        pytest.skip("results/sim not in this checkout")
    out = tmp_path / "sim"
    shutil.copytree(RUNS, out)
    (out / "ablation.json").unlink()
    (out / "ablation.md").unlink()
    doc = reaggregate(str(out))
    stats = json.loads((out / "ablation.json").read_text())["statistics"]
    assert stats == json.loads(json.dumps(doc["statistics"]))
    assert set(stats["rates"]) == set(doc["table"])
    md = (out / "ablation.md").read_text()
    assert "Wilson" in md and "Paired comparisons: survival_rate" in md and "| all | no_metacognition |" in md
    png = (out / "ablation.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_ablation_plot_draws_every_configuration_and_rejects_empty_statistics(tmp_path):
    import matplotlib.image

    rate = {"survival": {"rate": 0.5, "low": 0.3, "high": 0.7, "successes": 5, "n": 10, "runs": 2}}
    score = {"judge_mean": {"mean": 6.0, "low": 5.0, "high": 7.0, "n": 2}}
    one = plot_ablation_statistics({"rates": {"all": rate}, "scores": {"all": score}}, str(tmp_path / "one.png"))
    two = plot_ablation_statistics({"rates": {"all": rate, "memory_only": rate},
                                    "scores": {"all": score, "memory_only": score}}, str(tmp_path / "two.png"))
    a, b = matplotlib.image.imread(one), matplotlib.image.imread(two)
    assert a.shape == b.shape and (a != b).any()
    assert list(tmp_path.glob("*.tmp*")) == []
    with pytest.raises(ValueError, match="stats: expected 'rates'"):
        plot_ablation_statistics({"rates": {}, "scores": {}}, str(tmp_path / "empty.png"))
