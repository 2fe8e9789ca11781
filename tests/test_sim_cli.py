"""The sim CLI: argument wiring (standalone and under another parser) and ``sim report``."""
from __future__ import annotations

import json
import os

import pytest

from metacog_fast.town import load_scenario
from metacog_fast.cli.main import build_parser, main
from metacog_fast.town.jobs import report
from metacog_fast.town.engine import SimConfig, Simulation


def test_sim_arguments_reach_the_configs():
    from metacog_fast.cli.dataclass_args import config_from_args
    from metacog_fast.town.cli import ABLATION_FLAGS, FEATURE_FLAGS, RUN_FLAGS

    parser = build_parser(load="sim")
    a = parser.parse_args(["sim", "--scenario", "mystery", "--agents", "4", "--steps", "7", "--no-metacognition",
                           "--no-judge", "--llm-threads", "2", "--progress-every", "3"])
    assert (a.scenario, a.agents, a.steps, a.metacognition, a.sim_cmd) == ("mystery", 4, 7, False, None)
    opts, llm, agent = (config_from_args(s, a) for s in RUN_FLAGS)
    feats = config_from_args(FEATURE_FLAGS, a)
    assert (opts.scenario, opts.judge, llm.llm_threads, agent.progress_every) == ("mystery", False, 2, 3)
    assert (feats.memory, feats.metacognition) == (True, False)
    b = parser.parse_args(["sim", "ablate", "--scenario", "zombie", "--runs", "3", "--configs", "all,memory_only"])
    ab = config_from_args(ABLATION_FLAGS, b)
    assert (b.sim_cmd, ab.runs, ab.configs) == ("ablate", 3, ("all", "memory_only"))
    c = parser.parse_args(["sim", "report", "some/run"])
    assert (c.sim_cmd, c.run) == ("report", "some/run")


def test_report_of_a_saved_run(tmp_path):
    from metacog_fast.scoring.encoder import MiniLMEncoder

    sim = Simulation(load_scenario("party", n_agents=3), None, MiniLMEncoder(), str(tmp_path), SimConfig(use_llm=False))
    sim.run(2)
    sim.save()
    sim.close()
    text = report(str(tmp_path))
    assert "scenario party" in text and "attendance_rate" in text and "Hana (host" in text
    assert os.path.isfile(tmp_path / "viewer.html")
    assert main(["sim", "report", str(tmp_path / "run.json")]) == 0


def test_report_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="expected a run folder with run.json"):
        report(str(tmp_path))
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(ValueError, match="malformed JSON"):
        report(str(tmp_path))
