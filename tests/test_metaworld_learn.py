"""Single-task Dreamer-v3 learning runs (metacog_fast.metaworld.learn.run*): config round trip, the CLI flags,
bad input naming the argument, evaluation records, the published-curve loader, the report, and a
run killed with SIGKILL that resumes to the same records as an uninterrupted run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from metacog_fast.cli.dataclass_args import ConfigError
from metacog_fast.metrics import wilson_interval
from metacog_fast.metaworld.learn.config import LearnConfig, LearnJob, LearnModelConfig, SNAPSHOT_IGNORE
from metacog_fast.metaworld.learn.eval import EvalEpisode, evaluation_record
from metacog_fast.metaworld.learn.published import load_published

pytest.importorskip("metaworld")

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO / "results" / "metaworld" / "published" / "dreamerv3"

TINY_FLAGS = [
    "--task", "drawer-close-v3", "--max-episode-steps", "20", "--prefill-steps", "40", "--pretrain-updates", "2",
    "--batch", "2", "--seq-len", "8", "--ac-starts", "8", "--eval-every", "40", "--eval-episodes", "2",
    "--checkpoint-every", "1", "--train-ratio", "5", "--model-preset", "none", "--model-D", "16",
    "--model-Hd", "16", "--model-S", "4", "--model-C", "4", "--model-layers", "1", "--model-horizon", "4",
    "--model-wm-lr", "1e-3", "--model-ac-lr", "1e-3",
]


def tiny(**kw) -> LearnConfig:
    """A tiny run: 20-step episodes, 2 random prefill episodes, then 5 * 20 / 16 = 6.25 updates per
    agent episode (the fraction carried from episode to episode, and through checkpoints)."""
    model = LearnModelConfig(preset=None, D=16, Hd=16, S=4, C=4, layers=1, horizon=4, wm_lr=1e-3, ac_lr=1e-3)
    base = dict(task="drawer-close-v3", env_steps=120, max_episode_steps=20, prefill_steps=40, pretrain_updates=2,
                train_ratio=5.0, batch=2, seq_len=8, ac_starts=8, eval_every=40, eval_episodes=2,
                checkpoint_every=1, model=model)
    base.update(kw)
    return LearnConfig(**base)


def _parse(argv: list[str]):
    from metacog_fast.cli.main import build_parser
    from metacog_fast.metaworld.cli import learn_configs

    return learn_configs(build_parser(load="train").parse_args(["train", "learn", *argv]))


def _without_timing(recs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "timing"} for r in recs]


# --- configuration --------------------------------------------------------------------------------

def test_config_round_trips_through_json():
    cfg = tiny(seed=3, ac_starts=None)
    back = LearnConfig.from_dict(json.loads(cfg.to_json()))
    assert back == cfg
    assert back.model.precision == "auto" and back.model.muse is False
    assert back.agent == "dreamer"
    assert cfg.updates_per_step() == pytest.approx(5 / 16)


@pytest.mark.parametrize("kw, name", [
    ({"task": "no-such-task"}, "task"),
    ({"eval_every": 30}, "eval_every"),
    ({"batch": 0}, "batch"),
    ({"train_ratio": 0.0}, "train_ratio"),
    ({"seq_len": 50}, "seq_len"),
    ({"max_episode_steps": 501, "eval_every": 501}, "max_episode_steps"),
    ({"prefill_steps": -1}, "prefill_steps"),
    ({"ac_starts": 0}, "ac_starts"),
])
def test_bad_config_values_name_the_field(kw, name):
    with pytest.raises(ValueError, match=rf"^{name}:"):
        tiny(**kw)


def test_bad_model_precision_and_unknown_keys_are_named():
    with pytest.raises(ValueError, match="model.precision"):
        tiny(model=LearnModelConfig(precision="float16"))
    d = tiny().to_dict()
    d["replay_ratio"] = 3
    with pytest.raises(ValueError, match="unknown keys.*replay_ratio"):
        LearnConfig.from_dict(d)
    d = tiny().to_dict()
    d["model"]["width"] = 3
    with pytest.raises(ValueError, match=r"config.model: unknown keys.*width"):
        LearnConfig.from_dict(d)


def test_auto_precision_is_bf16_only_where_the_machine_has_it(monkeypatch):
    import metacog_fast.scoring.encoder as enc
    from metacog_fast.metaworld.models.dreamer import resolve_precision

    monkeypatch.setattr(enc, "cpu_has_bf16", lambda: False)
    assert resolve_precision("auto") == "float32" and resolve_precision("auto", "cuda") == "bfloat16"
    assert resolve_precision("bfloat16") == "bfloat16"
    monkeypatch.setattr(enc, "cpu_has_bf16", lambda: True)
    assert resolve_precision("auto") == "bfloat16" and resolve_precision("float32") == "float32"
    with pytest.raises(ValueError, match="precision: expected one of"):
        resolve_precision("fp16")


def test_task_without_version_suffix_is_canonicalised():
    assert tiny(task="drawer-close").task == "drawer-close-v3"


# --- CLI ---------------------------------------------------------------------------------------------

def test_cli_defaults_are_the_dataclass_defaults():
    cfg, job = _parse([])
    assert cfg == LearnConfig()
    assert job == LearnJob()


def test_cli_command_line_spells_the_config():
    cfg, job = _parse(TINY_FLAGS + ["--seed", "5", "--env-steps", "200", "--model-precision", "float32",
                                    "--run-dir", "/tmp/x", "--no-progress"])
    want = replace(tiny(seed=5, env_steps=200), model=replace(tiny().model, precision="float32"))
    want.validate()
    assert cfg == want
    assert job == LearnJob(run_dir="/tmp/x", progress=False)
    cfg2, _ = _parse(["--ac-starts", "none"])
    assert cfg2.ac_starts is None


def test_cli_bad_values_name_the_flag(capsys):
    with pytest.raises(SystemExit):
        _parse(["--train-ratio", "lots"])
    assert "--train-ratio" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse(["--model-precision", "float16"])
    assert "--model-precision" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--eval-every"):
        _parse(["--eval-every", "1234"])
    with pytest.raises(ConfigError, match="--task"):
        _parse(["--task", "reach-v9"])


def test_learn_commands_answer_help(capsys):
    from metacog_fast.cli.main import main

    for words in (["train", "learn"], ["train", "learn-all"], ["train", "learn-report"]):
        with pytest.raises(SystemExit) as e:
            main([*words, "--help"])
        assert e.value.code == 0
        assert "--" in capsys.readouterr().out


# --- evaluation records -------------------------------------------------------------------------------

def test_evaluation_record_rates_and_wilson_intervals():
    eps = [EvalEpisode(i, float(i), success=i < 3, final_success=i < 1, t_success=5 if i < 3 else -1, steps=20)
           for i in range(8)]
    rec = evaluation_record(eps)
    assert rec["n"] == 8
    assert rec["success"]["successes"] == 3 and rec["success"]["rate"] == 3 / 8
    assert (rec["success"]["low"], rec["success"]["high"]) == pytest.approx(wilson_interval(3, 8))
    assert rec["final_success"]["successes"] == 1
    assert (rec["final_success"]["low"], rec["final_success"]["high"]) == pytest.approx(wilson_interval(1, 8))
    assert rec["return_mean"] == pytest.approx(3.5)
    with pytest.raises(ValueError, match="episodes"):
        evaluation_record([])


# --- published curves --------------------------------------------------------------------------------

def test_published_loader_reads_the_committed_files():
    for task in ("reach-v3", "button-press-topdown-v3", "drawer-close-v3"):
        c = load_published(task, PUBLISHED)
        assert sorted(c.seeds) == [1, 2, 3]
        assert 0 in c.steps() and 100_000 in c.steps()
    c = load_published("button-press-topdown", PUBLISHED)
    # the file's rows at 100k: seeds 3, 1, 2 -> 0.1, 0.9, 0.3
    assert c.at(100_000) == {1: 0.9, 2: 0.3, 3: 0.1}
    assert c.mean_at(100_000) == pytest.approx((0.9 + 0.3 + 0.1) / 3)
    assert c.mean_at(123) is None


def test_published_loader_errors_name_the_argument_or_file(tmp_path):
    with pytest.raises(ValueError, match="^task: no published curve for 'peg-insert-side-v3'"):
        load_published("peg-insert-side-v3", PUBLISHED)
    with pytest.raises(ValueError, match="^task:"):
        load_published("", PUBLISHED)
    (tmp_path / "mw-reach.csv").write_text("steps,rate,seed\n0,0.0,1\n")
    with pytest.raises(ValueError, match="mw-reach.csv: expected the header step,success,seed"):
        load_published("reach-v3", tmp_path)
    (tmp_path / "mw-reach.csv").write_text("step,success,seed\n0,0.0,1\n100,1.5,1\n")
    with pytest.raises(ValueError, match=r"mw-reach.csv, line 3: expected step >= 0 and success in \[0, 1\]"):
        load_published("reach-v3", tmp_path)
    (tmp_path / "mw-reach.csv").write_text("step,success,seed\n0,zero,1\n")
    with pytest.raises(ValueError, match="line 2: expected step,success,seed numbers"):
        load_published("reach-v3", tmp_path)


# --- runs -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """The uninterrupted reference run: tiny() to 160 env steps in one call (evaluations at 0, 40,
    80, 120, 160), shared by the tests that compare a run made in pieces or killed with it."""
    from metacog_fast.metaworld.learn.run import LearnRunner

    d = tmp_path_factory.mktemp("learn") / "straight"
    LearnRunner(tiny(env_steps=160), d, progress=False).run()
    return d


def test_run_in_pieces_equals_one_run_and_refuses_another_config(straight, tmp_path):
    from metacog_fast.metaworld.learn.run import LearnRunner, read_learn_state
    from metacog_fast.metaworld.learn.records import read_curve

    LearnRunner(tiny(env_steps=60), tmp_path / "two", progress=False).run()
    LearnRunner(tiny(env_steps=120), tmp_path / "two", progress=False).run()  # the same run, a larger target
    a, b = read_curve(straight), read_curve(tmp_path / "two")
    assert [r["env_steps"] for r in b] == [0, 40, 80, 120]
    assert _without_timing(a[:4]) == _without_timing(b)  # the straight run's records up to 120
    st = read_learn_state(tmp_path / "two")
    assert st["resumed"] == 1 and st["env_steps"] == 120 and st["episodes"] == 6
    from metacog_fast.metaworld.models.dreamer import resolve_precision

    assert st["precisions"] == [{"from_env_steps": 0, "precision": resolve_precision("auto")}]
    # updates: 2 after the prefill (40 steps), then 5 * 20 / 16 = 6.25 per episode for 4 episodes:
    # 6, 6, 6, 7 (the fraction carried, across the resume after episode 3 too)
    assert st["updates"] == 2 + 25 and st["update_credit"] == pytest.approx(0.0, abs=1e-9)
    assert a[3]["updates"] == st["updates"]
    assert "env_steps" in SNAPSHOT_IGNORE
    with pytest.raises(ValueError, match="different configuration.*train_ratio"):
        LearnRunner(tiny(train_ratio=64.0), tmp_path / "two", progress=False)
    csv_rows = (tmp_path / "two" / "curve.csv").read_text().splitlines()
    assert csv_rows[0].startswith("task,seed,env_steps") and len(csv_rows) == 5
    train_rows = (tmp_path / "two" / "train_curve.csv").read_text().splitlines()
    assert len(train_rows) == 7 and train_rows[1].endswith(",random") and train_rows[-1].endswith(",agent")


def test_run_resumes_after_sigkill_with_the_same_records(straight, tmp_path):
    """A subprocess run SIGKILLed after its 80-step evaluation, resumed by the CLI to 160 steps,
    has the records of an uninterrupted run (training episodes, updates, evaluation outcomes, losses)."""
    from metacog_fast.cli.main import main
    from metacog_fast.metaworld.learn.run import read_learn_state
    from metacog_fast.metaworld.learn.records import read_curve

    killed = tmp_path / "killed"
    args = ["train", "learn", *TINY_FLAGS, "--run-dir", str(killed), "--no-progress"]
    # the killed run aims far beyond 160 steps, so that it is still running whenever the kill lands
    # (env_steps is not part of the run's identity: the resumed run's target is 160)
    proc = subprocess.Popen([sys.executable, "-m", "metacog_fast", *args, "--env-steps", "100000"], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    marker = killed / "evals" / "000000080.json"
    deadline = time.time() + 240
    while not marker.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, f"run ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert marker.exists() and not (killed / "evals" / "000000160.json").exists()
    assert main([*args, "--env-steps", "160"]) == 0  # the CLI, in this process: resumes the killed run
    a, b = read_curve(killed), read_curve(straight)
    assert [r["env_steps"] for r in a] == [0, 40, 80, 120, 160]
    assert _without_timing(a) == _without_timing(b)
    assert read_learn_state(killed)["resumed"] >= 1
    assert (killed / "train_curve.csv").read_text() == (straight / "train_curve.csv").read_text()


def test_schedule_and_report(tmp_path):
    from metacog_fast.metaworld.learn.report import LearnReportConfig, learn_report
    from metacog_fast.metaworld.learn.records import read_curve
    from metacog_fast.metaworld.learn.schedule import LearnSchedule, run_schedule

    sched = LearnSchedule(tasks=("drawer-close-v3",), seeds=(0, 1), stage_steps=40, run_root=str(tmp_path / "runs"),
                          out_root=str(tmp_path / "curves"), progress=False)
    states = run_schedule(sched, tiny(env_steps=80))
    assert [s["env_steps"] for s in states] == [80, 80]
    assert (tmp_path / "curves" / "drawer-close-v3" / "seed1" / "train_curve.csv").exists()
    doc = learn_report(LearnReportConfig(runs=str(tmp_path / "curves"), published=str(PUBLISHED),
                                         out=str(tmp_path / "out"), xmax=100, run_root=str(tmp_path / "runs")))
    assert (tmp_path / "out" / "learning_curves.png").stat().st_size > 1000
    task = doc["tasks"][0]
    assert task["task"] == "drawer-close-v3" and sorted(task["seeds"]) == ["0", "1"]
    assert [m["env_steps"] for m in task["mean"]] == [0, 40, 80]
    for m in task["mean"]:
        recs = [next(r for r in task["seeds"][s] if r["env_steps"] == m["env_steps"]) for s in ("0", "1")]
        k = sum(r["final_success"]["successes"] for r in recs)
        assert m["final_success"]["pooled_successes"] == k and m["final_success"]["pooled_n"] == 4
        assert (m["final_success"]["low"], m["final_success"]["high"]) == pytest.approx(wilson_interval(k, 4))
        assert m["final_success"]["mean_over_seeds"] == pytest.approx(np.mean([r["final_success"]["rate"] for r in recs]))
    from metacog_fast.metaworld.train.replay import ReplayBuffer

    sat = task["action_saturation"]["0"]
    assert [w["env_steps"] for w in sat] == [80] and sat[0]["episodes"] == 2  # episodes 3, 4 are the agent's
    rb = ReplayBuffer(tmp_path / "runs" / "drawer-close-v3" / "seed0" / "replay")
    rb.load_dir()
    acts = np.concatenate([e.prev_action[1:] for e in rb.episodes[2:4]])
    assert sat[0]["saturated"] == pytest.approx(np.mean([(np.abs(e.prev_action[1:]) > 0.99).mean()
                                                         for e in rb.episodes[2:4]]))
    assert acts.shape == (40, 4)
    pub = load_published("drawer-close-v3", PUBLISHED)
    assert task["at_equal_steps"] == [{"env_steps": 0, "ours": task["mean"][0]["final_success"]["mean_over_seeds"],
                                       "ours_low": task["mean"][0]["final_success"]["low"],
                                       "ours_high": task["mean"][0]["final_success"]["high"],
                                       "published": pub.mean_at(0)}]
    with pytest.raises(ValueError, match="^runs:"):
        learn_report(LearnReportConfig(runs=str(tmp_path / "nothing")))
    # two runs at once (one process each) draw the same curves as one after the other
    par = LearnSchedule(tasks=("drawer-close-v3",), seeds=(0, 1), stage_steps=40, run_root=str(tmp_path / "par"),
                        out_root=None, progress=False, workers=2)
    assert [s["updates"] for s in run_schedule(par, tiny(env_steps=80))] == [s["updates"] for s in states]
    for seed in (0, 1):
        a, b = (tmp_path / root / "drawer-close-v3" / f"seed{seed}" for root in ("runs", "par"))
        assert _without_timing(read_curve(b)) == _without_timing(read_curve(a))
    with pytest.raises(ValueError, match="workers"):
        LearnSchedule(workers=0).validate()


def test_profile_times_both_precisions(tmp_path):
    from metacog_fast.metaworld.learn.run import LearnRunner
    from metacog_fast.metaworld.learn.profile import profile_env_steps, profile_updates
    from metacog_fast.metaworld.train.replay import ReplayBuffer

    LearnRunner(tiny(env_steps=40), tmp_path / "r", progress=False).run()
    replay = ReplayBuffer(tmp_path / "r" / "replay")
    replay.load_dir()
    out = profile_updates(tiny(), replay, rounds=1, updates=1)
    assert out["bfloat16"]["seconds_per_update"] > 0 and out["float32"]["seconds_per_update"] > 0
    assert out["bf16_speedup"] == pytest.approx(out["float32"]["seconds_per_update"] / out["bfloat16"]["seconds_per_update"])
    assert profile_env_steps(tiny(), steps=30)["steps"] == 30


def test_actor_entropy_bonus_peaks_at_a_finite_std():
    """The entropy bonus is that of the squashed action: it must not keep rewarding a growing std
    (the pre-tanh Gaussian's sum log std did, and the learning runs' actors went bang-bang)."""
    import torch

    from metacog_fast.metaworld.models.dreamer import squashed_entropy

    g = torch.Generator().manual_seed(0)
    eps = torch.randn(100_000, 2, generator=g)
    mean = torch.tensor([0.0, 0.5])

    def bonus(s: float) -> float:
        std = torch.full((100_000, 2), s)
        return float(squashed_entropy(std, mean + std * eps).mean())

    values = {s: bonus(s) for s in (0.2, 0.9, 3.0, 6.0)}
    assert values[0.9] > values[0.2] and values[0.9] > values[3.0] > values[6.0]
    # by hand, for one sample: log std + log(1 - tanh(u)^2), summed over the action dims
    std, u = torch.tensor([[0.5, 2.0]]), torch.tensor([[0.3, -4.0]])
    want = (std.log() + torch.log(1 - torch.tanh(u) ** 2)).sum(-1)
    assert torch.allclose(squashed_entropy(std, u), want, atol=1e-5)
    assert torch.isfinite(squashed_entropy(std, torch.tensor([[60.0, -60.0]]))).all()


def test_versioned_checkpoint_survives_a_kill_between_its_two_writes(tmp_path):
    """A tensor file written after the last JSON (a kill between the two writes) never breaks the
    JSON's checkpoint; older tensor files go once a newer JSON is in place."""
    import torch

    from metacog_fast.metaworld.models.dreamer import Dreamer
    from metacog_fast.metaworld.train import checkpoint as ck

    cfg = tiny()
    model = Dreamer(cfg.model)
    stem = tmp_path / "ckpt" / "latest"
    ck.save_checkpoint(stem, model, cfg, meta={"n": 1}, versioned=True)  # type: ignore[arg-type]
    ck.save_checkpoint(stem, model, cfg, meta={"n": 2}, versioned=True)  # type: ignore[arg-type]
    assert sorted(p.name for p in stem.parent.iterdir()) == ["latest.2.safetensors", "latest.json"]
    (stem.parent / "latest.3.safetensors").write_bytes(b"half a tensor file")  # killed before its JSON
    doc = json.loads(stem.with_suffix(".json").read_text())
    tensors = ck.read_tensors(stem, doc)
    assert torch.equal(tensors["encoder.out.weight"], model.state_dict()["encoder.out.weight"])
    ck.save_checkpoint(stem, model, cfg, meta={"n": 3}, versioned=True)  # type: ignore[arg-type]
    assert sorted(p.name for p in stem.parent.iterdir()) == ["latest.4.safetensors", "latest.json"]
    doc = json.loads(stem.with_suffix(".json").read_text())
    (stem.parent / "latest.4.safetensors").write_bytes(b"corrupt")
    with pytest.raises(ValueError, match="does not match the digest"):
        ck.read_tensors(stem, doc)
