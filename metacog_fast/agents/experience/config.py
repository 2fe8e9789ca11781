"""Settings of the experience agents (one dataclass, one docstring per field)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ExperienceConfig:
    """Knobs of the plan-execute / reflect agents and of the memories."""

    subtask_action_cap: int = 20
    """Maximum actions of the ReAct loop of one sub-task (paper 003: 20)."""
    episode_action_cap: int = 50
    """Maximum environment actions of a whole task (ALFWorld's own limit is 50)."""
    max_subtasks: int = 6
    """Longest sub-task queue a plan may hold (extra items are dropped)."""
    retry_without_procedural: bool = True
    """After a failed sub-task, run it once more with the procedural memory hidden (paper 003)."""
    prompt_token_budget: int = 1500
    """Tokens the assembled action prompt may use (system, memories, trajectory)."""
    max_strategic: int = 8
    """Bound on the strategic principles kept (all go into the system prompt)."""
    dedup_threshold: float = 0.92
    """Cosine similarity above which two entries of one memory are merged."""
    demote_after_failures: int = 2
    """An SOP with at least this many failures and more failures than successes is demoted."""
    retire_after_failures: int = 4
    """An SOP with at least this many failures and a failure rate >= retire_failure_rate is retired."""
    retire_failure_rate: float = 0.75
    """Failure rate (failures / uses) at or above which a repeatedly failing SOP is retired."""
    plan_max_tokens: int = 96
    """Generation budget of a plan / re-plan call."""
    distill_max_tokens: int = 48
    """Generation budget of a strategy-writing call."""
    use_memory: bool = True
    """False: the no-memory baseline (nothing read, nothing written)."""
    learn: bool = True
    """False: memory is read but frozen (transfer / cross-model protocols)."""
