"""Configuration of the dual-process agent and the four feature-flag configurations."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any

CONFIG_NAMES = ("baseline", "amm", "srm", "full")


SWIFT_KINDS = ("ranker", "llm", "llm-ranker")
"""Swift proposers (``AgentConfig.swift``)."""

SAGE_TRIGGERS = ("situation", "fixed")
"""When Sage is called (``AgentConfig.sage_trigger``)."""


@dataclass(frozen=True)
class AgentConfig:
    """Everything that changes the agent's behaviour in an episode."""

    use_amm: bool = False
    """Adaptive Memory Module: salience-gated writes, T1 (after a Swift failure) and T4 (Sage) retrieval."""
    use_srm: bool = False
    """Self-Reflection Module: Gate-1 before every execution, stagnation signals, the Critic."""
    swift: str = "ranker"
    """Swift proposer: "ranker" (learned imitation ranker), "llm" (LLM constrained choice among a
    lexical top-8) or "llm-ranker" (LLM constrained choice among the ranker's top-8, the options the
    fine-tuned Swift was measured on, docs/finetune.md)."""
    max_steps: int = 50
    """Agent actions per episode: the budget, or its floor when ``budget_factor`` > 0."""
    budget_factor: float = 1.5
    """The budget is max(max_steps, ceil(budget_factor x the variation's gold path length))
    (docs/design.md §3.3: 19 of the 30 tasks' gold paths are longer than a flat 20-30 steps);
    0 gives a flat ``max_steps``."""
    sage_candidates: int = 6
    """Top Swift candidates offered to Sage (and the Critic) as grounded options."""
    sage_actions: int = 2
    """Actions Sage writes into the FIFO buffer per call."""
    sage_plan_tokens: int = 24
    """Tokens of Sage's free-text plan."""
    plan_every: int = 10
    """Deliberate planning: Sage is called when this many steps passed since its last call."""
    no_progress_steps: int = 4
    """``sage_trigger="fixed"``: Sage is called after this many consecutive steps without a score increase."""
    use_sage: bool = True
    """False: Swift-only (no Sage call; the Critic of SRM still acts when ``use_srm``)."""
    sage_trigger: str = "situation"
    """When Sage is called (with an empty buffer): "situation" = at the first step, after an invalid
    action, on stagnation (``stagnation_steps`` without a score gain), on a detected loop
    (``sage_on_loop``) or when the Swift is unsure (ranker top-1 margin < ``low_margin``);
    "fixed" = run 3's rule (first step, invalid action, ``no_progress_steps`` without gain, every
    ``plan_every`` steps). Each step records why Sage fired (``EpisodeResult.sage_reasons``)."""
    stagnation_steps: int = 8
    """``sage_trigger="situation"``: steps without a score gain that call Sage."""
    sage_on_loop: bool = True
    """``sage_trigger="situation"``: a strictly periodic loop of actions calls Sage."""
    low_margin: float = 0.0
    """``sage_trigger="situation"``: Sage is called when the ranker's top-1 logit exceeds the
    second by less than this (0 disables; needs a ranker Swift)."""
    loop_guard: bool = True
    """Mask the actions of a strictly periodic loop (``loop_period`` x ``loop_repeats``) for the next choice."""
    loop_period: int = 6
    """Longest loop period the loop guard looks for."""
    loop_repeats: int = 2
    """Copies of a block that make a loop (and at least ``loop_min_length`` steps)."""
    loop_min_length: int = 2
    """Steps a loop spans at least (2: the same step twice in a row is one)."""
    loop_wait_run: int = 10
    """``wait``/``wait1`` are masked only after this many in a row (gold paths wait up to 10 times
    while something grows, with the same text each time)."""
    loop_same_observations: bool = True
    """A loop must repeat the observations too (a boil's alternating "examine" / "use thermometer"
    while the temperature rises is progress, not a loop); False: the actions alone."""
    focus_guard: bool = True
    """``focus on X`` only where X is the task's target (a wrong focus ends the episode with -100)."""
    critic_budget: int = 3
    """Critic calls per episode at most (paper: 3)."""
    stagnation_window: int = 6
    """Steps of trajectory the stagnation detectors look at."""
    memory_k: int = 3
    """Records returned per T1/T4 retrieval."""
    t1_boost: float = 2.0
    """Score added (in ranker logits) to valid actions suggested by T1-retrieved records."""
    repair_cutoff: float = 0.85
    """difflib similarity a Gate-1 fuzzy repair needs (minor mismatches only)."""
    history: int = 4
    """Recent (action, observation) pairs shown to Sage and the Critic."""
    seed: int = 0
    """Seed of LLM sampling and ranker tie-breaking."""

    def validate(self) -> "AgentConfig":
        if self.swift not in SWIFT_KINDS:
            raise ValueError(f"swift: expected one of {', '.join(SWIFT_KINDS)}, got {self.swift!r}")
        if self.sage_trigger not in SAGE_TRIGGERS:
            raise ValueError(f"sage_trigger: expected one of {', '.join(SAGE_TRIGGERS)}, got {self.sage_trigger!r}")
        if not self.low_margin >= 0:
            raise ValueError(f"low_margin: expected >= 0, got {self.low_margin}")
        if self.loop_repeats < 2:
            raise ValueError(f"loop_repeats: expected >= 2, got {self.loop_repeats}")
        for name in ("max_steps", "sage_candidates", "sage_actions", "plan_every", "no_progress_steps",
                     "stagnation_window", "memory_k", "history", "stagnation_steps", "loop_period",
                     "loop_min_length", "loop_wait_run"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if not self.budget_factor >= 0:
            raise ValueError(f"budget_factor: expected >= 0, got {self.budget_factor}")
        if self.critic_budget < 0:
            raise ValueError(f"critic_budget: expected >= 0, got {self.critic_budget}")
        if not 0.0 < self.repair_cutoff <= 1.0:
            raise ValueError(f"repair_cutoff: expected in (0, 1], got {self.repair_cutoff}")
        return self

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def budget(self, gold_len: int) -> int:
        """Agent actions allowed in an episode whose gold path has ``gold_len`` actions."""
        if self.budget_factor <= 0 or gold_len <= 0:
            return self.max_steps
        return max(self.max_steps, math.ceil(self.budget_factor * gold_len))


CONFIGS: dict[str, AgentConfig] = {
    "baseline": AgentConfig(),
    "amm": AgentConfig(use_amm=True),
    "srm": AgentConfig(use_srm=True),
    "full": AgentConfig(use_amm=True, use_srm=True),
}


def config_for(name: str, **overrides: Any) -> AgentConfig:
    """The named configuration (baseline|amm|srm|full) with field overrides."""
    if name not in CONFIGS:
        raise ValueError(f"config: expected one of {CONFIG_NAMES}, got {name!r}")
    return replace(CONFIGS[name], **overrides).validate()
