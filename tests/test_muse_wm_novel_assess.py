"""The SA-head assessment on scripted episodes (``report.sa_metrics``, ``assess_on_scripted`` with
``novel=True``, the ``assess`` CLI and ``checkpoint_state``)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from metacog_fast.metrics import quantile_labels
from metacog_fast.metaworld.train.report import sa_metrics


def _rows(t_success: int | None, psi_row: list[float], T: int = 10, N: int = 5):
    lab = quantile_labels(t_success, T, N, steps=T)
    return np.tile(np.asarray(psi_row, np.float64), (T, 1)), lab, np.full(T, int(t_success is not None))


def test_sa_metrics_on_crafted_outcomes():
    # an early success (labels all 1), a late success (labels 1 only in the last quantile), a failure
    early = _rows(2, [0.9] * 5)
    late = _rows(9, [0.1, 0.1, 0.1, 0.1, 0.8])
    fail = _rows(None, [0.6, 0.2, 0.2, 0.2, 0.2])
    psi, lab, out = (np.concatenate(x) for x in zip(early, late, fail))
    m = sa_metrics(psi, lab, out)
    assert m["rows"] == 30
    # positive labels: 50 (early) + 10 (late) of 150
    assert m["positive_label_fraction"] == pytest.approx(60 / 150)
    assert m["always_failure_accuracy"] == pytest.approx(90 / 150)
    # wrong only on the failure's first quantile (0.6 >= 0.5 against c_1 = 0): 10 of 150 predictions
    assert m["metacognitive_accuracy"] == pytest.approx(140 / 150)
    # psi sums: early 4.5, late 1.2, failure 1.4 -> the late success ranks below the failure
    assert m["auroc2"] == pytest.approx(0.5)
    # flipping the failure's confidence below the late success makes the ranking perfect
    fail2 = _rows(None, [0.1] * 5)
    psi, lab, out = (np.concatenate(x) for x in zip(early, late, fail2))
    assert sa_metrics(psi, lab, out)["auroc2"] == pytest.approx(1.0)


def test_sa_metrics_one_outcome_is_undefined_not_a_number():
    psi, lab, out = _rows(None, [0.1] * 5)
    m = sa_metrics(psi, lab, out)
    assert np.isnan(m["auroc2"]) and "undefined" in m["auroc2_note"]
    assert m["metacognitive_accuracy"] == 1.0


def test_sa_metrics_rejects_mismatched_shapes():
    psi, lab, out = _rows(3, [0.5] * 5)
    with pytest.raises(ValueError, match="psi/labels/success"):
        sa_metrics(psi, lab[:, :4], out)
    with pytest.raises(ValueError, match="psi/labels/success"):
        sa_metrics(psi, lab, out[:-1])


def test_assess_novel_smoke_and_cli(tmp_path, monkeypatch, capsys):
    pytest.importorskip("metaworld")
    import metacog_fast.metaworld.train.rollout as rollout
    from metacog_fast.metaworld.models.dreamer import Dreamer
    from metacog_fast.metaworld.train.checkpoint import save_checkpoint
    from metacog_fast.cli.main import main
    from metacog_fast.metaworld.train.assess import checkpoint_state
    from metacog_fast.metaworld.train.config import profile
    from metacog_fast.metaworld.train.report import assess_on_scripted

    cfg = profile("smoke", agent="muse")  # tiny model, 20-step episodes
    stem = tmp_path / "pretrained"
    save_checkpoint(stem, Dreamer(cfg.model), cfg, meta={"pretrain_replay": 0})
    task = cfg.novel_tasks[0]
    made = []
    real_make = rollout.make_metaworld
    monkeypatch.setattr(rollout, "make_metaworld", lambda *a, **k: made.append(k.get("novel", a[-1])) or real_make(*a, **k))
    res = assess_on_scripted(stem, (task,), episodes_per_task=3, novel=True)
    assert res["novel"] is True and res["episodes"] == 3 and res["T_max"] == cfg.max_episode_steps
    assert made == [True]  # the env of the assessment zeroes the task embedding
    assert [r["task"] for r in res["episode_records"]] == [task] * 3
    assert res["per_task"][task]["episodes"] == 3
    assert res["per_task"][task]["rows"] == sum(r["steps"] for r in res["episode_records"])
    assert 0.0 <= res["metacognitive_accuracy"] <= 1.0
    # the novel env really zeroes the task embedding: same seed, known env differs only there
    from metacog_fast.metaworld.train.rollout import make_metaworld

    o_novel, _ = make_metaworld(task, 1, 20, novel=True).reset(seed=3)
    o_known, _ = make_metaworld(task, 1, 20, novel=False).reset(seed=3)
    assert not o_novel[39:].any() and o_known[39:].sum() == 1.0
    np.testing.assert_array_equal(o_novel[:39], o_known[:39])
    assert checkpoint_state(stem)["phase"] == "pretrained"

    out = tmp_path / "sa.json"
    assert main(["train", "assess", "--checkpoint", str(stem) + ".safetensors", str(stem), "--names", "a", "b",
                 "--tasks", task, "--novel", "--episodes-per-task", "2", "--out", str(out),
                 "--roc", str(tmp_path / "roc.png")]) == 0
    doc = json.loads(out.read_text())
    assert doc["novel"] is True and set(doc["checkpoints"]) == {"a", "b"}
    a, b = doc["checkpoints"]["a"], doc["checkpoints"]["b"]
    assert a["episodes"] == 2 and a["checkpoint_state"]["agent"] == "muse"
    # same seed: the same scripted episodes for every checkpoint
    assert a["episode_records"] == b["episode_records"]
    capsys.readouterr()
    assert main(["train", "assess", "--checkpoint", str(stem), str(stem), "--tasks", task,
                 "--out", str(tmp_path / "x.json")]) == 2
    assert "--names" in capsys.readouterr().err
    assert main(["train", "assess", "--checkpoint", str(stem), "--tasks", " , ", "--out", str(tmp_path / "x.json")]) == 2
    assert "--tasks" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_checkpoint_state_names_the_adapted_task(tmp_path):
    from metacog_fast.metaworld.models.dreamer import Dreamer
    from metacog_fast.metaworld.train.checkpoint import save_checkpoint
    from metacog_fast.metaworld.train.assess import checkpoint_state
    from metacog_fast.metaworld.train.config import profile

    cfg = profile("smoke", agent="muse")
    m = Dreamer(cfg.model)
    done = Path(tmp_path / "done")
    save_checkpoint(done, m, cfg, meta={"phase": "done", "updates": 7,
                                        "adapt": {"task_index": len(cfg.novel_tasks), "episode": 0}})
    st = checkpoint_state(done)
    assert st["adapted_task"] == cfg.novel_tasks[-1] and st["adapted_episodes"] == cfg.adapt_episodes
    mid = Path(tmp_path / "mid")
    save_checkpoint(mid, m, cfg, meta={"phase": "adapt", "updates": 3, "adapt": {"task_index": 0, "episode": 1}})
    assert checkpoint_state(mid)["adapted_task"] == cfg.novel_tasks[0]
    assert checkpoint_state(mid)["adapted_episodes"] == 1
