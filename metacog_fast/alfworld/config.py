"""Configuration dataclasses of the ALFWorld language agents and of the protocol runner."""
from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

AGENT_NAMES = ("react", "reflexion", "muse", "muse-lowest", "muse-random", "fcrf")
MAP_MODES = ("embed", "choose", "none")
REFLECT_ON = ("every", "failure")
SEED_SCHEMES = ("worker", "episode")
TRIGGER_ACTIONS = ("rollouts", "replan")
OPTION_DEFAULTS: dict[str, Any] = {"select_margin": 0.0, "trigger_steps": 3, "trigger_action": "rollouts",
                                   "trigger_span": 3}
"""What None stands for in these AgentConfig fields (None, so that run folders from before them resume:
runs.folder.config_differences takes a field an old snapshot lacks as equal only when it is None)."""
MUSE_AGENTS = ("muse", "muse-lowest", "muse-random")
REFLECTING_AGENTS = ("reflexion", "fcrf", *MUSE_AGENTS)

NEW_RUN_DEFAULTS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "reflect_on": ("failure", REFLECTING_AGENTS),
    "seed_scheme": ("episode", MUSE_AGENTS),
    "greedy_candidate": (True, MUSE_AGENTS),
    "plan_in_prompt": (False, MUSE_AGENTS),
}
"""AgentConfig fields whose None means "the run's default": a new run folder gets the value here
(for the agents listed; the others keep None, where the field means nothing), a resumed one the value
its snapshot holds (missing or null there: None, which plays as before the field existed). See
:func:`resolve_run_defaults` and docs/alfworld_agents.md "Defaults of new runs"."""

SPLITS = ("train", "valid_seen", "valid_train", "valid_unseen", "heldout_rooms")
"""ALFWorld's splits and our room-disjoint ``heldout_rooms`` (``alfworld.env.SPLITS``; here too, so that
checking a configuration imports no env)."""


def _check_int(name: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name}: expected an int >= {least}, got {value!r}")


def _check_split(split: Any) -> None:
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")


def _check_uri(name: str, uri: str | None) -> None:
    """An LLM URI that parses (None: the default, resolved when the LLM opens)."""
    if uri is None:
        return
    from metacog_fast.llm.uri import parse_uri

    try:
        parse_uri(uri)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


@dataclass
class AgentConfig:
    """Settings shared by every agent (one episode's behaviour)."""

    max_steps: int = 50
    """Environment steps per episode (docs/design.md: 50). Think lines do not count as steps."""
    max_thinks: int = 2
    """Consecutive think lines allowed before an action is forced (ReAct-style agents)."""
    examples: int = 2
    """Few-shot examples of the same task type in the actor prompt (docs/design.md: 2; 0 for an
    actor fine-tuned on transcripts without examples, see docs/finetune.md)."""
    example_max_steps: int = 12
    """Walkthrough steps kept per few-shot example (keeps the prompt inside SmolLM2's context)."""
    action_max_tokens: int = 24
    """Tokens generated for one action or think line."""
    map_actions: str = "embed"
    """Admissible-action mapping: "embed" (nearest admissible by MiniLM cosine), "choose"
    (LLM likelihood ranking over the admissible list) or "none" (the raw text is sent)."""
    reflections_kept: int = 3
    """Reflections of the same task put into the next prompt (Reflexion, FCRF: 3)."""
    reflection_max_tokens: int = 64
    """Tokens of one reflection / summary / plan."""
    reflect_on: str | None = None
    """When Reflexion, MUSE and FCRF reflect: after "every" episode, won or failed (paper 000's
    protocol; None is "every", so run folders from before this option resume), or only after a
    "failure" (Reflexion's original trials): a won episode then adds no reflection, and those
    already written stay in the next prompts. FCRF's lesson pool grows from fail -> success pairs
    either way."""
    plan_max_tokens: int = 48
    """Tokens of MUSE's initial plan."""
    rollouts: int = 5
    """MUSE rollouts per step (paper: 5)."""
    rollout_temperature: float = 0.5
    """Sampling temperature of the rollouts (paper: 0.5)."""
    rollout_max_tokens: int = 48
    """Tokens per rollout (the "context budget" of the future (action, observation) pairs)."""
    rollout_pairs: int = 3
    """At most this many (action, observation) pairs are parsed from one rollout."""
    seed: int = 0
    """Seed of sampling and of MUSE-random's choice."""
    decode_only_pick: bool | None = None
    """MUSE-random only: draw the uniform pick first and decode only the picked rollout, up to the end
    of its first action line (the whole rollout when that line is empty or a think). The rollouts are
    independent samples (rollout i seeded step seed + i) and the pick ignores their text, so the
    executed actions are those of picking among all ``rollouts`` decoded ones: bit-identical where
    decoding one sequence alone gives the tokens it gives in a batch (checked for llama.cpp on CPU,
    tests/test_alfworld_muse_random_pick.py), for about a tenth of the decoding. The step's record
    then holds only the picked rollout's first action and its score. None or False: decode and score
    every rollout, as MUSE does."""
    seed_scheme: str | None = None
    """MUSE: where a step's rollout seeds come from. "episode": derived from (``seed``, game, episode
    index, step index) (:func:`step_seed`), so a resumed run, or one with another worker count, draws
    the same rollouts at the same step; MUSE-random's pick is drawn from the same seed. "worker" (None:
    run folders from before this option): a counter that starts at ``seed`` in each worker process and
    grows by ``rollouts`` per step, so it restarts on resume and depends on what the worker played
    before (run 3). A new run gets "episode" (NEW_RUN_DEFAULTS)."""
    greedy_candidate: bool | None = None
    """MUSE: rollout 0 is decoded greedily (temperature 0), the others sampled at
    ``rollout_temperature``. For MUSE (select "highest") the executed action is the greedy rollout's
    unless another candidate's M_sa score is higher by at least ``select_margin``; MUSE-lowest and
    MUSE-random keep their rule over the same candidates. None or False: every rollout sampled and the
    highest score wins (paper 000; run folders from before this option). A new MUSE run gets True."""
    select_margin: float | None = None
    """With ``greedy_candidate``: how much higher than the greedy rollout's M_sa score another
    candidate's must be to replace it (a replacement also needs a strictly higher score). To be
    calibrated on valid_seen; None is 0.0: the highest score wins and ties keep the greedy action."""
    plan_in_prompt: bool | None = None
    """MUSE: whether the plan line goes into the actor's prompt (paper 000; None: run folders from
    before this option) or only into M_sa's input (False: the actor reads ReAct's prompt, the one it
    was trained on; issue 49, "the plan line is out of distribution"). A new MUSE run gets False."""
    trigger_threshold: float | None = None
    """MUSE's competence trigger: when the best candidate's M_sa score stays below this for
    ``trigger_steps`` consecutive steps, the agent switches strategy (``trigger_action``). None: off."""
    trigger_steps: int | None = None
    """Consecutive low-competence steps that fire the trigger (its count restarts after each firing;
    None: 3)."""
    trigger_action: str | None = None
    """What a firing changes: "rollouts" (``trigger_rollouts`` rollouts per step for the next
    ``trigger_span`` steps) or "replan" (a new plan written from the task and the steps so far; it
    replaces the plan M_sa scores with, and the actor's plan line where ``plan_in_prompt``). None:
    "rollouts"."""
    trigger_rollouts: int | None = None
    """Rollouts per step while a "rollouts" firing lasts (``rollouts`` is the normal count; None: twice
    ``rollouts``)."""
    trigger_span: int | None = None
    """Steps a "rollouts" firing lasts (None: 3)."""

    def get(self, name: str) -> Any:
        """The value of an option whose None stands for a fixed default (OPTION_DEFAULTS); the field
        itself for any other."""
        v = getattr(self, name)
        if v is not None:
            return v
        if name == "trigger_rollouts":
            return 2 * self.rollouts
        return OPTION_DEFAULTS.get(name)

    def validate(self) -> "AgentConfig":
        if self.map_actions not in MAP_MODES:
            raise ValueError(f"map_actions: expected one of {MAP_MODES}, got {self.map_actions!r}")
        if not isinstance(self.examples, int) or self.examples < 0:
            raise ValueError(f"examples: expected an int >= 0, got {self.examples!r}")
        for name in ("max_steps", "action_max_tokens", "reflection_max_tokens", "plan_max_tokens",
                     "rollouts", "rollout_max_tokens", "rollout_pairs", "example_max_steps"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if self.reflect_on is not None and self.reflect_on not in REFLECT_ON:
            raise ValueError(f"reflect_on: expected one of {REFLECT_ON}, got {self.reflect_on!r}")
        if self.reflections_kept < 0 or self.max_thinks < 0:
            raise ValueError("reflections_kept / max_thinks: expected >= 0")
        if not (self.rollout_temperature >= 0.0):
            raise ValueError(f"rollout_temperature: expected >= 0, got {self.rollout_temperature!r}")
        if self.seed_scheme is not None and self.seed_scheme not in SEED_SCHEMES:
            raise ValueError(f"seed_scheme: expected one of {SEED_SCHEMES}, got {self.seed_scheme!r}")
        for name in ("greedy_candidate", "plan_in_prompt", "decode_only_pick"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, bool):
                raise ValueError(f"{name}: expected None or a bool, got {v!r}")
        m = self.get("select_margin")
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m < 0:
            raise ValueError(f"select_margin: expected a finite float >= 0, got {m!r}")
        t = self.trigger_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 < t <= 1.0):
            raise ValueError(f"trigger_threshold: expected None or a score in (0, 1], got {t!r}")
        for name in ("trigger_steps", "trigger_rollouts", "trigger_span"):
            _check_int(name, self.get(name), 1)
        if self.get("trigger_action") not in TRIGGER_ACTIONS:
            raise ValueError(f"trigger_action: expected one of {TRIGGER_ACTIONS}, got {self.trigger_action!r}")
        if self.trigger_threshold is not None and self.decode_only_pick:
            raise ValueError("trigger_threshold: the competence trigger needs every rollout's score; "
                             "decode_only_pick scores only the pick")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AgentConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"agent config: unknown fields {sorted(unknown)}")
        return cls(**d).validate()


def step_seed(seed: int, game: str, episode: int, step: int) -> int:
    """The seed of one MUSE step under ``seed_scheme="episode"``: a hash of (config seed, game key,
    episode index, step index), in [0, 2**31) so that rollout i's seed (+ i) stays a valid llama.cpp seed."""
    key = f"{int(seed)}\x1f{game}\x1f{int(episode)}\x1f{int(step)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") % (2**31 - 64)


def resolve_run_defaults(agent: str, ac: AgentConfig, snapshot: Mapping[str, Any] | None) -> AgentConfig:
    """``ac`` with its NEW_RUN_DEFAULTS fields that are None set: from ``snapshot`` (the resumed run
    folder's agent_config; a missing field stays None) or, for a new folder (``snapshot`` None), to the
    new-run default where it applies to ``agent``. Fields set explicitly are left as they are (the run
    folder then checks them against the snapshot)."""
    changes: dict[str, Any] = {}
    for name, (value, agents) in NEW_RUN_DEFAULTS.items():
        if getattr(ac, name) is not None:
            continue
        if snapshot is not None:
            changes[name] = snapshot.get(name)
        elif agent in agents:
            changes[name] = value
    return dataclasses.replace(ac, **changes) if changes else ac


@dataclass
class RunConfig:
    """One protocol run: which agent, which games, how many episodes per phase."""

    agent: str = "react"
    """One of AGENT_NAMES."""
    split: str = "valid_train"
    """Split of the deployment games (development OOD: valid_train)."""
    data: str | None = None
    """ALFWorld data folder (None: the env's default lookup)."""
    tasks: int = 12
    """Number of games, taken round-robin over the 6 task types (2 per type for 12)."""
    adapt_episodes: int = 5
    """Adaptation episodes per game before the test episodes (Alg. 4: 5; 0 = no adaptation)."""
    test_episodes: int = 5
    """Test episodes per game (Alg. 4: 5)."""
    scorer: str | None = None
    """Pre-deployment scorer folder (MUSE agents; written by ``metacog pretrain alfworld``)."""
    llm: str | None = None
    """LLM URI (None: $METACOG_LLM, then the embedded SmolLM2)."""
    reflector: str | None = None
    """Reflection LLM URI of Reflexion, MUSE and FCRF's Mentor (None: the actor ``llm``). Paper 000's
    Reflexion + SL is ``agent="reflexion"`` with the SFT actor as ``llm`` and the DPO reflector here."""
    label: str | None = None
    """The run's row label in reports (None: the agent name), e.g. "reflexion+sl"."""
    n_threads: int = 1
    """llama.cpp threads per worker (1 on a shared machine, see docs/llm.md)."""
    n_ctx: int = 8192
    """LLM context length in tokens. The default is SmolLM2's trained context: a 50-step ReAct episode
    with 2 few-shot examples reaches ~4.5k tokens, so the default episode budget fits without a flag."""
    workers: int = 1
    """Worker processes; work is split by task type (a type's games stay in one process)."""
    incremental_steps: int = 50
    """g_eta minibatch updates after a game's adaptation episodes (MUSE agents)."""
    agent_config: AgentConfig = field(default_factory=AgentConfig)
    """Per-episode behaviour."""

    def validate(self) -> "RunConfig":
        """Every value checked on its own (no file is read): ValueError naming the field."""
        if self.agent not in AGENT_NAMES:
            raise ValueError(f"agent: expected one of {AGENT_NAMES}, got {self.agent!r}")
        _check_split(self.split)
        for name in ("tasks", "workers", "n_threads"):
            _check_int(name, getattr(self, name), 1)
        for name in ("adapt_episodes", "test_episodes", "incremental_steps"):
            _check_int(name, getattr(self, name), 0)
        _check_uri("llm", self.llm)
        _check_uri("reflector", self.reflector)
        if self.n_ctx < 512:
            raise ValueError(f"n_ctx: expected a context window of at least 512 tokens, got {self.n_ctx}")
        if self.reflector is not None and self.agent == "react":
            raise ValueError("reflector: agent 'react' does not reflect; drop reflector or pick "
                             "reflexion, muse* or fcrf")
        if self.agent.startswith("muse") and not self.scorer:
            raise ValueError(f"scorer: agent {self.agent!r} needs a pre-deployment scorer folder "
                             "(run `metacog pretrain alfworld` first)")
        if self.agent_config.decode_only_pick and self.agent != "muse-random":
            raise ValueError(f"decode_only_pick: only agent 'muse-random' can pick a rollout before decoding "
                             f"(its pick ignores the rollouts' text); agent {self.agent!r} needs all of them")
        self.agent_config.validate()
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        d = dict(d)
        ac = AgentConfig.from_dict(d.pop("agent_config", {}) or {})
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"run config: unknown fields {sorted(unknown)}")
        return cls(**d, agent_config=ac)


@dataclass
class PretrainConfig:
    """MUSE pre-deployment on ALFWorld (``metacog pretrain alfworld``): Reflexion episodes on a
    split, then M_sa trained on their chunks (``protocol.pretrain``)."""

    split: str = "valid_seen"
    """Pre-deployment split (its games are not the deployment games)."""
    tasks: int = 6
    """Games, taken round-robin over the task types."""
    episodes: int = 2
    """Reflexion episodes per game."""
    expert_positives: bool = False
    """Add expert walkthrough chunks as positives of M_sa (one walkthrough per pre-deployment game, so
    as balanced over the task types as the games). Off by default: M_sa then learns from the actor's
    own outcomes; with expert positives it learns "looks like the expert" (docs/alfworld_agents.md,
    Run 2), which a report must show as its own configuration."""
    epochs: int | None = None
    """M_sa training epochs (None: ScorerConfig's)."""
    train_only: bool = False
    """Skip the collection; train M_sa on the episodes already recorded under OUT/collect."""

    def validate(self) -> "PretrainConfig":
        _check_split(self.split)
        for name in ("tasks", "episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"epochs: expected >= 1 or None, got {self.epochs}")
        return self
