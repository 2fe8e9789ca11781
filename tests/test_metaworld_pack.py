"""A learning run packed to commit and unpacked elsewhere (metacog_fast.metaworld.learn.pack,
``metacog train pack|unpack``): the episodes re-simulate from their actions and seeds to the same
observations, a run unpacked from an fp32-moment pack continues bit for bit like the original,
a bf16-moment pack is smaller and continues close to it, and damage or a re-simulation that
differs is reported, never hidden."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("metaworld")

from metacog_fast.metaworld.learn.config import LearnConfig, LearnJob, LearnModelConfig  # noqa: E402
from metacog_fast.metaworld.learn.pack import episode_digest, pack_run, unpack_run  # noqa: E402
from metacog_fast.metaworld.learn.run import learn_metaworld  # noqa: E402
from metacog_fast.metaworld.train.replay import Episode  # noqa: E402


def tiny(env_steps: int) -> LearnConfig:
    """20-step episodes, 2 random prefill episodes, then 5 * 20 / 16 = 6.25 updates per agent episode."""
    model = LearnModelConfig(preset=None, D=16, Hd=16, S=4, C=4, layers=1, horizon=4, wm_lr=1e-3, ac_lr=1e-3)
    return LearnConfig(task="drawer-close-v3", env_steps=env_steps, max_episode_steps=20, prefill_steps=40,
                       pretrain_updates=2, train_ratio=5.0, batch=2, seq_len=8, ac_starts=8, eval_every=40,
                       eval_episodes=2, checkpoint_every=1, model=model)


def _evals(run: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(p.read_text()).items() if k != "timing"}
            for p in sorted((run / "evals").glob("*.json"))]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """80 env steps: 2 random prefill episodes and 2 agent episodes (with psi), 3 evaluations."""
    d = tmp_path_factory.mktemp("learn") / "run"
    learn_metaworld(tiny(80), LearnJob(run_dir=str(d), progress=False))
    return d


def test_fp32_pack_resumes_bit_for_bit_and_bf16_close(run, tmp_path):
    original = tmp_path / "original"
    shutil.copytree(run, original)
    learn_metaworld(tiny(120), LearnJob(run_dir=str(original), progress=False))
    sizes = {}
    for moments in ("fp32", "bf16"):
        man = pack_run(run, tmp_path / f"pack_{moments}", moments=moments)
        assert man["replay"]["episodes"] == 4 and man["replay"]["stored_in_full"] == []
        sizes[moments] = man["state"]["bytes"]
        rep = unpack_run(tmp_path / f"pack_{moments}", tmp_path / f"run_{moments}")
        assert rep["mismatched"] == [] and rep["resimulated"] == 4
        for i in range(4):  # the re-simulated replay is the original's, psi included (fp16)
            a = Episode.load(run / "replay" / f"ep_{i:06d}.npz")
            b = Episode.load(tmp_path / f"run_{moments}" / "replay" / f"ep_{i:06d}.npz")
            assert episode_digest(a) == episode_digest(b) and a.source == b.source
            np.testing.assert_array_equal(a.prev_action, b.prev_action)
            assert set(a.extra) == set(b.extra)
            for k in a.extra:
                np.testing.assert_allclose(a.extra[k], b.extra[k], atol=2e-3, rtol=1e-3)
        learn_metaworld(tiny(120), LearnJob(run_dir=str(tmp_path / f"run_{moments}"), progress=False))
    assert _evals(tmp_path / "run_fp32") == _evals(original)
    bf = _evals(tmp_path / "run_bf16")
    assert [r["env_steps"] for r in bf] == [r["env_steps"] for r in _evals(original)]
    assert bf[:3] == _evals(original)[:3]  # before the unpack nothing changed
    assert sizes["bf16"] < 0.8 * sizes["fp32"]


def test_an_episode_that_does_not_reproduce_is_stored_whole(run, tmp_path):
    src = tmp_path / "run"
    shutil.copytree(run, src)
    ep = Episode.load(src / "replay" / "ep_000001.npz")
    ep.obs[5, 0] += 1e-3  # what another simulator build could have produced
    ep.save(src / "replay" / "ep_000001.npz")
    man = pack_run(src, tmp_path / "pack")
    assert man["replay"]["stored_in_full"] == [1]
    rep = unpack_run(tmp_path / "pack", tmp_path / "back")
    assert rep["stored_in_full"] == [1] and rep["mismatched"] == []
    back = Episode.load(tmp_path / "back" / "replay" / "ep_000001.npz")
    assert episode_digest(back) == episode_digest(ep)


def test_damage_and_bad_folders_are_clear_errors(run, tmp_path):
    from metacog_fast._integrity import ModelFileError

    pack_run(run, tmp_path / "pack")
    with pytest.raises(ValueError, match="run_dir: .* not empty"):
        unpack_run(tmp_path / "pack", run)
    with pytest.raises(ValueError, match="pack: .* no pack.json"):
        unpack_run(tmp_path, tmp_path / "x")
    with pytest.raises(ValueError, match="run_dir: .* no checkpoint"):
        pack_run(tmp_path, tmp_path / "p2")
    with pytest.raises(ValueError, match="moments"):
        pack_run(run, tmp_path / "p3", moments="int8")
    data = bytearray((tmp_path / "pack" / "replay.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "pack" / "replay.npz").write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="replay.npz"):
        unpack_run(tmp_path / "pack", tmp_path / "y")
    assert not (tmp_path / "y").exists()


def test_the_cli_packs_and_unpacks(run, tmp_path, capsys):
    from metacog_fast.cli.main import main

    assert main(["train", "pack", str(run), "--out", str(tmp_path / "pk"), "--no-progress"]) == 0
    assert main(["train", "unpack", str(tmp_path / "pk"), "--run-dir", str(tmp_path / "rd"), "--no-progress"]) == 0
    assert json.loads((tmp_path / "rd" / "unpack.json").read_text())["mismatched"] == []
    assert _evals(tmp_path / "rd") == _evals(run)
    capsys.readouterr()
    with pytest.raises(SystemExit) as bad:
        main(["train", "pack", str(run), "--out", str(tmp_path / "x"), "--moments", "fp8"])
    assert bad.value.code == 2 and "moments" in capsys.readouterr().err
