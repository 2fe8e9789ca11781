"""The ``metacog`` command: ``info`` report and an end-to-end ``demo`` with tiny counts."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from metacog_fast.cli.main import main


def _run(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metacog_fast", *args], capture_output=True, text=True, timeout=timeout)


def test_info_prints_the_report():
    proc = _run("info")
    assert proc.returncode == 0, proc.stderr
    for word in ("Backends", "Versions", "Environments", "metaworld", "alfworld", "scienceworld", "torch"):
        assert word in proc.stdout


def test_info_json_has_backends_versions_and_env_probes(capsys):
    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    import metacog_fast

    assert report["backends"]["torch"] == metacog_fast.backends()["torch"]
    assert report["versions"]["python"]
    names = {e["name"]: e for e in report["environments"]}
    assert set(names) == {"metaworld", "alfworld", "scienceworld"}
    for e in names.values():
        assert isinstance(e["usable"], bool) and (e["usable"] or e["reason"])


def test_demo_tiny_end_to_end_writes_valid_json(tmp_path):
    out = tmp_path / "sub" / "demo.json"
    proc = _run(
        "demo", "--quick", "--no-progress", "--out", str(out),
        "--metaworld-tasks", "1", "--metaworld-steps", "150",
        "--alfworld-games", "1",
        "--scienceworld-tasks", "find-non-living-thing",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "metacog demo" in proc.stdout and f"wrote {out}" in proc.stdout
    report = json.loads(out.read_text())
    assert set(report["parts"]) == {"metaworld", "alfworld", "scienceworld"}
    for name, part in report["parts"].items():
        assert "error" not in part, (name, part)
        assert part["n_episodes"] == 1 and part["success_rate"] == 1.0
        assert part["steps_per_second"] > 0 and part["mean_reset_seconds"] > 0
        assert part["episodes"][0]["success"] is True
    assert report["parts"]["metaworld"]["episodes"][0]["steps"] == 150
    assert report["parts"]["alfworld"]["cached_reset_seconds"] > 0
    assert report["parts"]["scienceworld"]["episodes"][0]["score"] == 100.0
    assert not list(out.parent.glob("*.tmp"))  # atomic write leaves no temp file


def test_demo_reports_a_broken_part_and_keeps_the_others(tmp_path, capsys):
    out = tmp_path / "demo.json"
    rc = main(["demo", "--no-progress", "--parts", "metaworld,alfworld", "--out", str(out),
               "--metaworld-tasks", "1", "--metaworld-steps", "20", "--alfworld-data", str(tmp_path / "none")])
    assert rc == 1
    report = json.loads(out.read_text())
    assert "ALFWorld games not found" in report["parts"]["alfworld"]["error"]
    assert report["parts"]["metaworld"]["n_episodes"] == 1


def test_demo_rejects_unknown_parts_and_bad_counts(tmp_path, capsys):
    assert main(["demo", "--parts", "chess", "--out", str(tmp_path / "x.json")]) == 2
    assert "unknown ['chess']" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
    with pytest.raises(SystemExit):
        main(["demo", "--metaworld-tasks", "0"])
    assert "expected an integer >= 1" in " ".join(capsys.readouterr().err.replace("\u2502", " ").split())


def test_console_script_entry_point():
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert eps.get("metacog") == "metacog_fast.cli.main:main"


def test_contributed_commands_are_listed_but_not_imported():
    code = (
        "import sys; from metacog_fast.cli.main import build_parser; h = build_parser().format_help(); "
        "print(all(c in h for c in ('sim', 'train', 'adapt')), "
        "any(m in sys.modules for m in ('metacog_fast.town.cli', 'metacog_fast.metaworld.cli', 'metacog_fast.town.runner', "
        "'metacog_fast.metaworld.train.config', 'torch')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False"]


@pytest.mark.parametrize("argv, expected", [(["sim", "--help"], "--scenario"),
                                            (["train", "metaworld", "--help"], "--profile"),
                                            (["adapt", "metaworld", "--help"], "--checkpoint")])
def test_contributed_commands_load_when_chosen(argv, expected, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0
    assert expected in capsys.readouterr().out


def test_demo_agent_part_muse_wm(tmp_path, capsys):
    out = tmp_path / "demo.json"
    assert main(["demo", "--no-progress", "--parts", "muse_wm", "--muse-wm-steps", "3", "--out", str(out)]) == 0
    part = json.loads(out.read_text())["parts"]["muse_wm"]
    assert part["steps"] == 3 and part["decisions_per_second"] > 0 and part["n_episodes"] == 2
    d = part["dreamer"]  # Dreamer-v3 beside it: same weights and seed, no self-regulation, no psi
    assert d["steps"] == 3 and d["decisions_per_second"] > 0 and d["psi_sums"] == [] and len(part["psi_sums"]) == 3
    assert part["model"]["kind"] == "untrained" and "not competence" in part["model"]["note"]
    printed = capsys.readouterr().out
    assert "muse_wm" in printed and "n/a: untrained" in printed


def test_demo_default_runs_every_agent_part_and_quick_only_the_environments():
    """The main job shows the agents by default; --quick keeps the environment checks alone."""
    import argparse

    from metacog_fast.cli import demo

    p = argparse.ArgumentParser()
    demo.add_arguments(p)
    args = demo.options(p.parse_args([]))
    assert set(args.parts.split(",")) == {"metaworld", "alfworld", "scienceworld", "muse_wm", "alfworld_muse",
                                          "sw_agent", "sim"}
    from metacog_fast.cli.demo_registry import DEMO_PARTS, model_info

    assert {n for n, part in DEMO_PARTS.items() if part.quick} == {"metaworld", "alfworld", "scienceworld"}
    with pytest.raises(ValueError, match="kind: expected one of"):
        model_info("x", "pretty good")


def test_demo_without_alfworld_games_skips_those_parts_and_says_how_to_get_them(tmp_path, monkeypatch):
    """A machine with no ALFWorld games: the demo runs what it can, names what it skipped, exits 0."""
    from metacog_fast.alfworld import env as alfworld_env

    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setattr(alfworld_env, "_REPO_DATA", tmp_path / "no-repo-data")
    monkeypatch.setattr(alfworld_env, "_DOWNLOAD_DATA", tmp_path / "no-download")
    monkeypatch.setattr(alfworld_env, "_TARBALL", tmp_path / "no-tarball.tar.xz")
    out = tmp_path / "demo.json"
    rc = main(["demo", "--no-progress", "--parts", "metaworld,alfworld,alfworld_muse", "--out", str(out),
               "--metaworld-tasks", "1", "--metaworld-steps", "20"])
    assert rc == 0
    parts = json.loads(out.read_text())["parts"]
    assert parts["metaworld"]["n_episodes"] == 1
    for name in ("alfworld", "alfworld_muse"):
        assert "alfworld-download" in parts[name]["skipped"] and "ALFWorld games not found" in parts[name]["skipped"]
    from metacog_fast.envs import probe_envs

    (probe,) = probe_envs(names=["alfworld"])
    assert not probe.usable and "ALFWORLD_DATA" in probe.reason


def test_demo_alfworld_muse_uses_the_shipped_fine_tuned_actor(tmp_path, monkeypatch):
    """The MUSE part runs the fine-tuned actor that ships in the package and says what it measured."""
    pytest.importorskip("alfworld")
    from metacog_fast.envs import probe_envs

    (probe,) = probe_envs(names=["alfworld"])
    if not probe.usable:
        pytest.skip(probe.reason)
    monkeypatch.setenv("METACOG_MODELS_HOME", str(tmp_path / "models"))  # the merge happens here, once
    out = tmp_path / "demo.json"
    rc = main(["demo", "--no-progress", "--parts", "alfworld_muse", "--out", str(out),
               "--alfworld-muse-steps", "2", "--alfworld-muse-rollouts", "2"])
    assert rc == 0
    part = json.loads(out.read_text())["parts"]["alfworld_muse"]
    from metacog_fast.llm.models import SHIPPED_MODELS

    info = json.loads((SHIPPED_MODELS / "alfworld" / "model.json").read_text())
    ev = info["evaluation"]["success"]
    assert part["actor"].startswith(f"finetuned:alfworld: {info['description']}")
    assert f"measured {ev['successes']}/{ev['n']} = {100 * ev['rate']:.1f} %" in part["actor"]
    assert 1 <= len(part["steps"]) <= 2
    for s in part["steps"]:
        assert len(s["rollouts"]) == len(s["scores"]) == 2 and 0 <= s["chosen"] < 2
        assert all(0.0 <= x <= 1.0 for x in s["scores"])
    # M_sa comes from the scorer that ships beside the actor, and the part says how it measured
    assert part["scorer"].startswith("shipped with the actor") and "AUROC2 on held-out games" in part["scorer"]
    assert part["model"]["kind"] == "shipped"
    assert list((tmp_path / "models" / ".merged").glob("*/model-q8_0.gguf"))
