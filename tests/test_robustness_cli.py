"""Robustness probes of the ``metacog`` command line (issue 55, defect 7): a bad value is a usage
error before any work or any write: exit code 2, one line on stderr naming the flag and what was
expected, no traceback, and no configuration left in the run folder, so that the corrected command
in the same folder runs.

The commands run through the real entry point, :func:`metacog_fast.cli.main.main` (one through the
installed console script); nothing that loads a model is reached.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from metacog_fast.cli.main import main


def _usage_error(capsys, argv: list[str], flag: str, expected: str) -> str:
    """Run ``metacog argv``: exit code 2 and one stderr line naming ``flag`` and saying ``expected``."""
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("metacog ") and ": error: " in lines[0]
    assert flag in lines[0] and expected in lines[0], lines[0]
    assert "Traceback" not in err
    return lines[0]


def _nothing_written(folder: Path) -> None:
    assert not folder.exists() or not any(p.is_file() for p in folder.rglob("*")), sorted(folder.rglob("*"))


def _have_alfworld_games() -> bool:
    from metacog_fast.alfworld.env import find_split_dir
    from metacog_fast.envs.base import EnvSetupError

    try:
        find_split_dir("valid_train")
    except EnvSetupError:
        return False
    return True


# A run that plays no episode (0 adaptation and 0 test episodes): it writes the folder's configuration
# and returns, in about a second, without opening a model.
NO_EPISODES = ["--tasks", "1", "--adapt-episodes", "0", "--test-episodes", "0"]


# ------------------------------------------------------------------------------- run alfworld

def test_zero_threads_is_refused_before_the_run_folder_and_the_corrected_rerun_runs(tmp_path, capsys):
    out = tmp_path / "run"
    _usage_error(capsys, ["run", "alfworld", "--agent", "react", *NO_EPISODES, "--n-threads", "0", "--out", str(out)],
                 "--n-threads", "expected an int >= 1, got 0")
    _nothing_written(out)
    if not _have_alfworld_games():
        pytest.skip("ALFWorld games not unpacked: the corrected run needs them")
    assert main(["run", "alfworld", "--agent", "react", *NO_EPISODES, "--n-threads", "1", "--out", str(out)]) == 0
    snapshot = json.loads((out / "config.json").read_text())
    assert snapshot["config"]["n_threads"] == 1


@pytest.mark.parametrize("argv, flag, expected", [
    (["--split", "nosuch"], "--split", "expected one of train, valid_seen, valid_train, valid_unseen, heldout_rooms, got 'nosuch'"),
    (["--data", "{tmp}/missing"], "--data", "expected an existing folder"),
    (["--data", "{tmp}"], "--data", "ALFWorld games not found"),  # a folder, but no games in it
    (["--llm", "foo://x"], "--llm", "unknown scheme 'foo'"),
    (["--llm", "llama-cpp:///no/such/model.gguf"], "--llm", "no such GGUF file"),
    (["--agent", "reflexion", "--reflector", "http://"], "--reflector", "expected http://host:port/v1"),
    (["--workers", "0"], "--workers", "expected an int >= 1"),
    (["--tasks", "-3"], "--tasks", "expected an int >= 1"),
    (["--n-ctx", "100"], "--n-ctx", "at least 512"),
    (["--agent", "muse", "--scorer", "{tmp}/no-scorer"], "--scorer", "expected an existing folder"),
])
def test_run_alfworld_bad_value_is_a_usage_error(tmp_path, capsys, argv, flag, expected):
    out = tmp_path / "run"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if "--agent" not in argv:
        argv = ["--agent", "react", *argv]
    _usage_error(capsys, ["run", "alfworld", *argv, "--out", str(out)], flag, expected)
    _nothing_written(out)


def test_bad_llm_from_the_environment_names_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("METACOG_LLM", "foo://x")
    line = _usage_error(capsys, ["run", "alfworld", "--agent", "react", "--out", str(tmp_path / "run")],
                        "--llm", "unknown scheme 'foo'")
    assert "$METACOG_LLM" in line


def test_a_folder_of_another_configuration_is_a_usage_error_saying_what_to_do(tmp_path, capsys):
    if not _have_alfworld_games():
        pytest.skip("ALFWorld games not unpacked")
    out = tmp_path / "run"
    assert main(["run", "alfworld", "--agent", "react", *NO_EPISODES, "--out", str(out)]) == 0
    capsys.readouterr()
    line = _usage_error(capsys, ["run", "alfworld", "--agent", "react", *NO_EPISODES, "--n-ctx", "4096",
                                 "--out", str(out)], "config.json", "different configuration (fields ['n_ctx'])")
    assert "holds no episode yet" in line and "delete" in line  # the way out when nothing was recorded


@pytest.mark.parametrize("argv, flag, expected", [
    (["--split", "nosuch"], "--split", "got 'nosuch'"),
    (["--data", "{tmp}/missing"], "--data", "expected an existing folder"),
    (["--n-threads", "0"], "--n-threads", "expected an int >= 1"),
    (["--llm", "foo://x"], "--llm", "unknown scheme"),
])
def test_pretrain_alfworld_bad_value_is_a_usage_error(tmp_path, capsys, argv, flag, expected):
    out = tmp_path / "pre"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    _usage_error(capsys, ["pretrain", "alfworld", *argv, "--out", str(out)], flag, expected)
    _nothing_written(out)


# ------------------------------------------------------------------------------- sim

@pytest.mark.parametrize("argv, flag, expected", [
    (["--agents", "-1"], "--agents", "expected an int >= 1 or none, got -1"),
    (["--agents", "0", "ablate"], "--agents", "got 0"),
    (["ablate", "--agents", "-2"], "--agents", "got -2"),
    (["--steps", "0"], "--steps", "got 0"),
    (["--step-budget", "0"], "--step-budget", "expected seconds > 0"),
    (["--scenario", "nosuch"], "--scenario", "no such built-in"),
    (["--world", "nosuch"], "--world", "no such built-in"),
    (["--llm", "foo://x"], "--llm", "unknown scheme 'foo'"),
    (["--judge-llm", "ftp://x"], "--judge-llm", "unknown scheme 'ftp'"),
    (["--llm-threads", "0"], "--llm-threads", "got 0"),
])
def test_sim_bad_value_is_a_usage_error(tmp_path, capsys, argv, flag, expected):
    out = tmp_path / "sim"
    _usage_error(capsys, ["sim", *argv, "--out", str(out)], flag, expected)
    _nothing_written(out)


# ------------------------------------------------------------------------------- other run commands

@pytest.mark.parametrize("argv, flag, expected", [
    (["learn", "alfworld", "--split", "nosuch"], "--split", "alfworld has the splits"),
    (["learn", "scienceworld", "--split", "valid_seen"], "--split", "scienceworld has the splits train, dev, test"),
    (["learn", "alfworld", "--threads", "0"], "--n-threads", "expected an int >= 1"),
    (["learn", "alfworld", "--llm", "foo://x"], "--llm", "unknown scheme"),
    (["learn", "alfworld", "--iterations", "0"], "--iterations", "expected an int >= 1"),
    (["learn", "alfworld", "--memory-in", "{tmp}/none.json"], "--memory-in", "expected an existing file"),
    (["run", "scienceworld", "--llm", "foo://x"], "--llm", "unknown scheme"),
    (["run", "scienceworld", "--n-threads", "0"], "--n-threads", "expected >= 1"),
    (["finetune", "eval", "--llm", "foo://x"], "--llm", "unknown scheme"),
    (["finetune", "eval", "--n-threads", "0"], "--n-threads", "expected an int >= 1"),
    (["finetune", "reflections", "--actor", "llama-cpp:///no/such.gguf"], "--actor", "no such GGUF file"),
])
def test_other_commands_bad_value_is_a_usage_error(tmp_path, capsys, argv, flag, expected):
    out = tmp_path / "out"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    _usage_error(capsys, [*argv, "--out", str(out)], flag, expected)
    _nothing_written(out)


def test_console_script_exits_2_with_one_line(tmp_path):
    """The installed ``metacog`` (the issue's own probe), not only ``main``: no traceback, exit 2."""
    exe = Path(sys.executable).with_name("metacog")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "metacog_fast"]
    proc = subprocess.run([*cmd, "sim", "--agents", "-1", "--out", str(tmp_path / "sim")], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "METACOG_LLM": ""})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "metacog sim: error: --agents (agents): expected an int >= 1 or none, got -1"
    _nothing_written(tmp_path / "sim")


def test_sft_with_a_missing_dataset_leaves_no_run_folder(tmp_path):
    """``finetune sft --data-dir /nope``: the clear error comes before the output folder is made."""
    pytest.importorskip("peft")
    pytest.importorskip("trl")
    from metacog_fast.alfworld.finetune.sft import SFTConfig, train_sft

    out = tmp_path / "run"
    with pytest.raises((FileNotFoundError, ValueError), match="nope"):
        train_sft(tmp_path / "nope", out, SFTConfig())
    assert not out.exists()
