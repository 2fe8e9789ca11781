"""End to end on a real ScienceWorld task: gold paths -> ranker, AMM warm-up, one episode per
configuration, resume, report; mechanism accounting checked on the persisted episodes."""
from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("scienceworld")
from metacog_fast.scienceworld import env as swe  # noqa: E402

if swe.java_version() is None:
    pytest.skip("Java is not installed: " + swe.JAVA_HINT, allow_module_level=True)

from metacog_fast.scienceworld.report import report  # noqa: E402
from metacog_fast.scienceworld.runner import RunConfig, run_protocol  # noqa: E402

STEPS = 4


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("swrun"))
    cfg = RunConfig(tasks=[13], variations=1, max_steps=STEPS, budget_factor=0.0, warmup_per_task=1, workers=1)
    res = run_protocol(out, cfg)
    return out, cfg, res


def _episodes(out: str) -> dict[str, dict]:
    eps = {}
    for c in ("baseline", "amm", "srm", "full"):
        files = os.listdir(os.path.join(out, "episodes", c))
        assert len(files) == 1
        with open(os.path.join(out, "episodes", c, files[0])) as f:
            eps[c] = json.load(f)
    return eps


@pytest.mark.starts_first(seconds=40)
def test_one_episode_per_configuration(run) -> None:
    out, _, res = run
    assert res["tasks"][0]["episodes"] == 4
    eps = _episodes(out)
    for c, e in eps.items():
        m = e["mechanisms"]
        assert e["task"] == "find-plant" and not e["errored"]
        assert e["budget"] == STEPS and 1 <= e["steps"] <= STEPS and len(e["actions"]) == e["steps"]
        assert 0.0 <= e["score"] <= 100.0
        assert m["swift_steps"] + m["buffer_steps"] == e["steps"]
        assert m["system2_calls"] == m["sage_calls"] + m["critic_calls"] >= 1  # Sage plans at step 0
        assert m["critic_calls"] <= 3
        assert e["llm_calls"] >= m["system2_calls"]
        assert e["agent_seconds"] >= 0 and e["llm_seconds"] > 0 and e["env_seconds"] > 0
        if "amm" in c or c == "full":
            assert m["t4"] == m["sage_calls"]  # T4 accompanies every Sage planning call
        else:
            assert m["t1"] == m["t4"] == m["memory_writes"] == 0
        if c in ("srm", "full"):
            assert m["gate1_checks"] >= e["steps"]  # every executed action passed Gate-1
            # every check either let an action through (as given or repaired) or dropped it
            assert m["gate1_checks"] - m["gate1_drops"] == e["steps"]
            assert m["gate1_repairs"] <= e["steps"]
        else:
            assert m["gate1_checks"] == m["critic_calls"] == m["stagnation_events"] == 0
    with open(os.path.join(out, "memory", "warmup", "find-plant.sqlite.done.json")) as f:
        warm = json.load(f)
    assert len(warm["episodes"]) == 1 and warm["records"] == warm["episodes"][0]["mechanisms"]["memory_writes"]
    for c in ("warmup", "amm", "full"):  # memory stores came back from the task into the run folder
        assert os.path.getsize(os.path.join(out, "memory", c, "find-plant.sqlite")) > 0


def test_resume_runs_nothing_twice_and_rejects_other_configs(run) -> None:
    out, cfg, _ = run
    again = run_protocol(out, cfg)
    assert again["tasks"][0]["episodes"] == 0
    from metacog_fast.llm.models import models_identity

    with open(os.path.join(out, "run.json")) as f:  # the hashes of the model behind cfg.llm
        assert json.load(f)["identity"] == models_identity(llm=None)
    with pytest.raises(ValueError, match="different configuration"):
        run_protocol(out, RunConfig(tasks=[13], variations=1, max_steps=STEPS + 1, budget_factor=0.0, warmup_per_task=1))


def test_report_tables_and_chart(run) -> None:
    out, _, _ = run
    summary = report(out)
    assert set(summary) == {"baseline", "amm", "srm", "full"}
    for s in summary.values():
        assert s["episodes"] == 1 and s["tasks"] == 1
        assert 0.0 <= s["mechanisms"]["swift_executed_pct"] <= 100.0
        assert abs(s["mechanisms"]["swift_executed_pct"] + s["mechanisms"]["buffer_executed_pct"] - 100.0) < 1e-6
    md = open(os.path.join(out, "tables.md")).read()
    assert "Table 1" in md and "Table 2" in md and "find-plant" in md
    assert os.path.getsize(os.path.join(out, "scores.png")) > 1000


def test_llm_swift_among_the_rankers_candidates(run, tmp_path) -> None:
    """``swift="llm-ranker"``: the LLM chooses among the ranker's top-8 (the options the fine-tuned
    Swift was measured on); the run trains or reuses the ranker like ``swift="ranker"``."""
    import shutil

    from metacog_fast.scienceworld.runner import make_swift
    from metacog_fast.llm import open_llm

    out, _cfg, _res = run
    (tmp_path / "run").mkdir()
    shutil.copy(os.path.join(out, "ranker.npz"), tmp_path / "run" / "ranker.npz")
    llm = open_llm(n_threads=1, n_ctx=2048)
    try:
        sw = make_swift("llm-ranker", tmp_path / "run", llm)
        assert sw.name == "llm" and sw.prefilter == "ranker"
        assert make_swift("llm", tmp_path, llm).prefilter == "lexical"
    finally:
        llm.close()
    cfg = RunConfig(tasks=[13], variations=1, max_steps=3, budget_factor=0.0, warmup_per_task=0, workers=1,
                    configs=["baseline"], swift="llm-ranker")
    run_protocol(str(tmp_path / "run"), cfg)
    files = os.listdir(tmp_path / "run" / "episodes" / "baseline")
    ep = json.load(open(tmp_path / "run" / "episodes" / "baseline" / files[0]))
    assert 1 <= ep["steps"] <= 3 and ep["mechanisms"]["swift_steps"] + ep["mechanisms"]["buffer_steps"] == ep["steps"]
    with pytest.raises(ValueError, match="swift"):
        RunConfig(tasks=[13], swift="gpt").validate()
