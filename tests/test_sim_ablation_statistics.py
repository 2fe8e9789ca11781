"""The town ablation's report carries the statistics: Wilson intervals of the rates and every pair
of configurations compared, paired by seed (rebuilt from the committed runs in results/sim)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from metacog_fast.sim.runner import reaggregate

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
