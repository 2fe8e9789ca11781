"""Town simulation of generative agents with metacognition (paper 001, ReplicantLife).

>>> from metacog_fast.town import load_scenario, Simulation, SimConfig
>>> sc = load_scenario("zombie", n_agents=3, steps=10, seed=0)

See docs/sim.md.
"""
from __future__ import annotations

from metacog_fast.town.loader import AgentSpec, InterviewQuestion, Scenario, load_scenario, load_world
from metacog_fast.town.schema import SchemaError
from metacog_fast.town.world import World, visible_pairs

__all__ = ["AgentSpec", "InterviewQuestion", "Scenario", "SchemaError", "World", "load_scenario", "load_world",
           "visible_pairs"]
