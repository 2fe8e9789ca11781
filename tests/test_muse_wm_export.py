"""Acting exports (``metacog train export``, metacog_fast.metaworld.muse_wm.export): a learning run's
latest checkpoint to fp16 acting weights + model.json, loaded by ``MuseWMAgent.from_pretrained`` and
``from_checkpoint`` (which reads learning runs too), checked against its sha256 before use.

Tolerance: with the same noise, the fp16 export's actions equal the fp32 checkpoint's within 2e-2
absolute on a [-1, 1] action scale over 20 steps of a real Meta-World episode (fp16 keeps ~3
significant digits of each weight; measured max |diff| is printed by the assertion on failure)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("metaworld")

from metacog_fast.metaworld.learn.config import LearnConfig, LearnJob, LearnModelConfig  # noqa: E402
from metacog_fast.metaworld.muse_wm import ActConfig, MuseWMAgent  # noqa: E402
from metacog_fast.metaworld.muse_wm.export import export_acting, load_pretrained  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny learning run on drawer-close (two evaluations, a checkpoint after each)."""
    from metacog_fast.metaworld.learn.run import learn_metaworld

    model = LearnModelConfig(preset=None, D=16, Hd=16, S=4, C=4, layers=1, horizon=4, wm_lr=1e-3, ac_lr=1e-3)
    cfg = LearnConfig(task="drawer-close-v3", env_steps=40, max_episode_steps=20, prefill_steps=40, pretrain_updates=2,
                      train_ratio=32.0, batch=2, seq_len=8, ac_starts=8, eval_every=40, eval_episodes=2,
                      checkpoint_every=1, model=model)
    out = tmp_path_factory.mktemp("learn") / "run"
    learn_metaworld(cfg, LearnJob(run_dir=str(out), progress=False))
    return out


def _actions(agent: MuseWMAgent, steps: int = 20) -> np.ndarray:
    from metacog_fast.metaworld.env import MetaWorldEnv

    env = MetaWorldEnv(task="drawer-close-v3", seed=3, max_episode_steps=steps)
    obs, _ = env.reset(seed=3)
    agent.reset()
    rng = np.random.default_rng(0)
    sz, out = agent.sizes, []
    H = agent.cfg.H if agent.cfg.self_regulation else 0
    for _ in range(steps):
        a = agent.act(obs, u=rng.random((1, sz.S), dtype=np.float32), u_prior=rng.random((1, sz.S), dtype=np.float32),
                      eps=rng.standard_normal((H + 1, 1, sz.A), dtype=np.float32))
        out.append(a)
        obs, *_ = env.step(a)
    return np.stack(out)


def test_a_learning_run_loads_for_acting_as_dreamer(run_dir):
    agent = MuseWMAgent.from_checkpoint(run_dir)  # the run folder: its ckpt/latest
    assert agent.cfg.self_regulation is False  # a learning run trains no SA head: it acts as Dreamer-v3
    a = _actions(agent, 3)
    assert a.shape == (3, 4) and np.isfinite(a).all()


@pytest.mark.parametrize("self_regulation", [False, True])
def test_fp16_export_acts_like_the_fp32_checkpoint(run_dir, tmp_path, self_regulation):
    mj = export_acting(run_dir, tmp_path / "exp", precision="fp16")
    doc = json.loads(mj.read_text())
    assert doc["precision"] == "fp16" and doc["source"]["env_steps"] == 40 and doc["source"]["task"] == "drawer-close-v3"
    ck, _ = load_pretrained(tmp_path / "exp")
    assert doc["parameters"] == sum(v.size for v in ck.weights.values()) + sum(v.size for v in ck.encoder.values())
    act = ActConfig(self_regulation=self_regulation, H=3)
    a32 = _actions(MuseWMAgent.from_checkpoint(run_dir, act=act))
    a16 = _actions(MuseWMAgent.from_pretrained(tmp_path / "exp", act=act))
    diff = float(np.abs(a32 - a16).max())
    assert diff <= 2e-2, diff


def test_fp16_is_half_the_fp32_export(run_dir, tmp_path):
    d16 = json.loads(export_acting(run_dir, tmp_path / "a", precision="fp16").read_text())
    d32 = json.loads(export_acting(run_dir, tmp_path / "b", precision="fp32").read_text())
    assert d16["parameters"] == d32["parameters"]
    assert d16["bytes"] < 0.6 * d32["bytes"]


def test_a_damaged_export_is_refused_before_loading(run_dir, tmp_path):
    from metacog_fast._integrity import ModelFileError

    export_acting(run_dir, tmp_path / "exp")
    st = tmp_path / "exp" / "acting.safetensors"
    data = bytearray(st.read_bytes())
    data[-100:-90] = b"\0" * 10
    st.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="acting.safetensors"):
        MuseWMAgent.from_pretrained(tmp_path / "exp")


def test_bad_sources_and_names_are_clear_errors(run_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="source: .* without ckpt/latest.json"):
        export_acting(tmp_path / "empty", tmp_path / "o")
    with pytest.raises(ValueError, match="source: no checkpoint"):
        export_acting(tmp_path / "nothing", tmp_path / "o")
    with pytest.raises(ValueError, match="precision"):
        export_acting(run_dir, tmp_path / "o", precision="int4")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="out: .* not an acting export"):
        export_acting(run_dir, tmp_path / "busy")
    with pytest.raises(ValueError, match="name_or_path: 'no-such-model'.*metacog train export"):
        MuseWMAgent.from_pretrained("no-such-model")


def test_the_cli_exports_with_the_runs_own_evaluation(run_dir, tmp_path, capsys):
    from metacog_fast.cli.main import main

    assert main(["train", "export", str(run_dir), "--out", str(tmp_path / "cli")]) == 0
    doc = json.loads((tmp_path / "cli" / "model.json").read_text())
    ev = json.loads((run_dir / "evals" / f"{40:09d}.json").read_text())
    assert doc["measured"]["env_steps"] == 40 and doc["measured"]["final_success"] == ev["final_success"]
    capsys.readouterr()
    # a bad source is a usage error naming it (exit status 2), not an exception
    assert main(["train", "export", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")]) == 2
    assert "source" in capsys.readouterr().err
