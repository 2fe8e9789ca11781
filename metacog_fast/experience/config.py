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
    """After a failed sub-task, run it once more, with the procedural memory hidden where there is
    one (paper 003). Every condition gets this second attempt, so that the memory condition is not
    compared with a baseline that had fewer tries."""
    verify_step_allowance: int = 50
    """Environment steps kept above ``episode_action_cap`` for the verifier's ``look`` /
    ``inventory`` (they read state and are not charged to the agent; ALFWorld's own limit is set
    to the sum)."""
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
    show_strategic: bool = True
    """False (ablation): strategic principles are still distilled and stored, but not put into any
    prompt (and so not counted as used); procedural and tool memory work as usual."""
    action_grounding: str = "choice"
    """How the actor's turn becomes an admissible command (``grounding.py``): "choice" (decoding
    constrained to exactly one option, ``llm.generate_choice``), "embed" (free text, then exact
    match or the option nearest by MiniLM cosine) or "choose" (free text, then exact match or the
    LLM's likelihood ranking of the options, ``llm.choose``)."""
    loop_breaking: bool = True
    """Hide commands already executed since the last never-seen observation of the episode
    (``grounding.LoopBreaker``): a command repeated with an unchanged observation is not re-offered;
    likewise an ``access_guide <skill>`` already fetched (or auto-consulted) in the current sub-task."""
    action_shortlist: int = 8
    """Offer the actor only this many env commands per turn: those nearest (embedder cosine) to the
    current sub-task's description and goal, after loop breaking; 0 offers all. SmolLM2-135M copies
    the ``go to`` pattern of its trajectory whatever the sub-task; a shortlist grounded in the
    sub-task text puts ``take book 1 from bed 1`` among few options when the sub-task is "take the book"."""
    subtask_as_command: bool = True
    """When some env commands spell out the sub-task itself (``grounding.subtask_commands``: "take the
    book" -> "take book 1 from bed 1"), offer only those (and ``finish``): the plan step is grounded
    to the commands that perform it, and the LLM still picks among them and decides when to finish."""
    free_action_max_tokens: int = 16
    """Generation budget of a free-text action ("embed" / "choose" grounding)."""

    def __post_init__(self) -> None:
        from metacog_fast.experience.grounding import GROUNDINGS

        if self.action_grounding not in GROUNDINGS:
            raise ValueError(f"action_grounding: expected one of {GROUNDINGS}, got {self.action_grounding!r}")
        if int(self.action_shortlist) < 0:
            raise ValueError(f"action_shortlist: expected >= 0 (0 = all commands), got {self.action_shortlist!r}")
        if not isinstance(self.verify_step_allowance, int) or self.verify_step_allowance < 0:
            raise ValueError(f"verify_step_allowance: expected an int >= 0, got {self.verify_step_allowance!r}")
        for name in ("subtask_action_cap", "episode_action_cap", "max_subtasks", "free_action_max_tokens"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)!r}")
