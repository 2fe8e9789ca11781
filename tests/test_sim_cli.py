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
    from metacog_fast.cli.dataclass_args import build, parse
    from metacog_fast.town.cli import AblateCommand, SimCommand

    parser = build_parser(load="sim")
    a = parser.parse_args(["sim", "--scenario", "mystery", "--agents", "4", "--steps", "7", "--no-metacognition",
                           "--no-judge", "--llm-threads", "2", "--progress-every", "3"])
    cmd = parse(a)
    assert a.sim_cmd is None and a.cli_target is SimCommand
    opts, llm, agent, feats = build(cmd.run), build(cmd.llm), build(cmd.agent), build(cmd.features)
    assert (opts.scenario, opts.agents, opts.steps, feats.metacognition) == ("mystery", 4, 7, False)
    assert (opts.scenario, opts.judge, llm.llm_threads, agent.progress_every) == ("mystery", False, 2, 3)
    assert (feats.memory, feats.metacognition) == (True, False)
    b = parser.parse_args(["sim", "ablate", "--scenario", "zombie", "--runs", "3", "--configs", "all,memory_only"])
    ab = build(parse(b).ablation)
    assert (b.sim_cmd, b.cli_target, ab.runs, ab.configs) == ("ablate", AblateCommand, 3, ("all", "memory_only"))
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
