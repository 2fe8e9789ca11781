"""``runs/demo/report.html``: written by every ``metacog demo`` run, self-contained, and rendered by
a real headless Chromium with one section per part that ran."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from metacog_fast.cli.demo_report import render, svg_line
from metacog_fast.cli.main import main


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium on this machine (apt install chromium) to render the report")


def _dom(page) -> str:
    out = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_demo_writes_a_report_that_chromium_renders(tmp_path):
    out = tmp_path / "demo.json"
    rc = main(["demo", "--no-progress", "--parts", "metaworld,muse_wm", "--out", str(out),
               "--metaworld-tasks", "1", "--metaworld-steps", "20", "--muse-wm-steps", "5"])
    assert rc == 0
    report = json.loads(out.read_text())
    page = tmp_path / "report.html"
    assert page.is_file()
    text = page.read_text()
    assert "http://" not in text and "https://" not in text and "<script src" not in text  # self-contained
    dom = _dom(page)
    for section in ("summary", "muse_wm", "envs"):
        assert f'id="{section}"' in dom, section
    assert "<polyline" in dom and "Σψ" in dom
    assert report["parts"]["muse_wm"]["weights"] in dom  # says which weights it showed
    assert len(report["parts"]["muse_wm"]["psi_sums"]) == report["parts"]["muse_wm"]["steps"]
    # untrained weights: the table says so instead of showing a success rate, and names the kind
    assert "n/a: untrained" in dom and "Dreamer-v3" in dom and "scripted expert" in dom


def test_alfworld_rollouts_skips_and_errors_are_shown():
    report = {"parts": {
        "alfworld_muse": {"task": "put a pen in desk", "actor": "finetuned:alfworld: x", "plan": "p", "scorer": "s",
                          "n_episodes": 1, "success_rate": 0.0, "wall_seconds": 1.0,
                          "steps": [{"action": "go to desk 1", "observation": "You arrive at desk 1.",
                                     "rollouts": [[["go to desk 1", "o"]], [["look", "o"]]], "scores": [0.7, 0.2],
                                     "chosen": 0}]},
        "sim": {"skipped": "needs nothing <b>"}, "sw_agent": {"error": "boom"}}}
    page = render(report)
    assert "id='alfworld_muse'" in page and "class='chosen'><td class='num'>M_sa 0.7</td>" in page
    assert "skipped: needs nothing &lt;b&gt;" in page and "failed: boom" in page
    assert "id='sim'" not in page and "id='sw_agent'" not in page  # no section for parts that did not run
    assert "no data" in svg_line([]) and svg_line([1.0, 1.0]).count("<polyline") == 1


def test_every_section_renders_in_chromium(tmp_path):
    """A report holding every part (the figures' shapes as the parts write them) renders each section."""
    from metacog_fast.cli.demo_registry import model_info

    report = {"parts": {
        "metaworld": {"episodes": [{"task": "reach-v3", "success": True, "steps": 20}], "n_episodes": 1,
                      "success_rate": 1.0, "wall_seconds": 1.0, "model": model_info("scripted", "scripted expert")},
        "muse_wm": {"task": "coffee-button-v3", "steps": 3, "decisions_per_second": 100.0, "success": False,
                    "psi_sums": [2.0, 2.5, 3.0], "backend": "cpu", "weights": "fresh XS weights (untrained)",
                    "dreamer": {"steps": 3, "decisions_per_second": 500.0, "success": False, "psi_sums": []},
                    "n_episodes": 2, "success_rate": 0.0, "wall_seconds": 1.0,
                    "model": model_info("MUSE-WM", "untrained", "control loop only")},
        "alfworld_muse": {"task": "put a pen in desk", "actor": "a", "plan": "p", "scorer": "s", "n_episodes": 1,
                          "success_rate": 1.0, "wall_seconds": 1.0, "model": model_info("finetuned:alfworld", "shipped"),
                          "steps": [{"action": "go to desk 1", "observation": "ok", "rollouts": [[["go to desk 1", ""]]],
                                     "scores": [0.5], "chosen": 0}]},
        "sw_agent": {"task": "find-plant", "variation": 1, "config": "full", "score": 50.0, "won": False,
                     "actions": ["look around"], "sources": ["swift"], "notes": ["sage: 1. find a plant"],
                     "mechanisms": {"sage_calls": 1}, "n_episodes": 1, "success_rate": 0.0, "wall_seconds": 1.0,
                     "model": model_info("ranker", "trained in the demo")},
        "sim": {"timeline": [{"step": 1, "agent": "Ada", "kind": "progress", "text": "4/10 fine"}],
                "wall_seconds": 1.0, "model": model_info("SmolLM2", "base model")}}}
    page = tmp_path / "report.html"
    page.write_text(render(report))
    dom = _dom(page)
    for section in ("summary", "muse_wm", "alfworld_muse", "sw_agent", "sim", "envs"):
        assert f'id="{section}"' in dom, section
    assert "n/a: untrained" in dom and "4/10 fine" in dom and "Dreamer-v3" in dom
