"""The generative agent with metacognition (paper 001, ReplicantLife) of the grid-town simulation
(metacog_fast.town): the agent (:mod:`.agent`), its memory stream (:mod:`.memory`) and its prompts
(:mod:`.prompts`)."""
from metacog_fast.town.generative.agent import (
    Action,
    AgentConfig,
    Decision,
    Features,
    GenerativeAgent,
    Mind,
    StepContext,
)
from metacog_fast.town.generative.memory import KINDS, MemoryStream, PendingMemory, ThreadSafeEncoder

__all__ = [
    "KINDS", "Action", "AgentConfig", "Decision", "Features", "GenerativeAgent", "MemoryStream", "Mind",
    "PendingMemory", "StepContext", "ThreadSafeEncoder",
]
