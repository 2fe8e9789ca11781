"""Preference data for the reflection LLM (MUSE pre-deployment, the DPO half): which reflections
are followed by success.

Per game of a pre-deployment split: the actor plays a first Reflexion attempt; if it fails, the
reflector writes ``reflections`` reflections on it (sampled, seeded per sample), and for each one
the actor plays the next attempt with only that reflection in its memory. A reflection whose next
attempt won is *chosen* against one whose next attempt failed; both answer the very same prompt
(the reflection messages of the first attempt), as DPO needs. The same collection, run with
another reflector on the same games, measures reflection quality: the success rate of the
attempts that follow its reflections (:func:`quality`).

One JSON record per game (``games/<game>.json``, atomic), so a killed run resumes at the next
game; ``pairs.jsonl`` and ``manifest.json`` are rewritten at the end of every call.
"""
from __future__ import annotations

import itertools
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from metacog_fast.alfworld.store import read_json, write_json_atomic
from metacog_fast.finetune.base import sha256_file


@dataclass
class ReflectionDataConfig:
    """One collection of reflection outcomes."""

    split: str = "valid_seen"
    """Pre-deployment split whose games are played (never the evaluation split)."""
    games: int = 60
    """Games, round-robin over the six task types."""
    skip_games: int = 0
    """Leave out the first this-many games of that order: a measurement on games that a pair
    collection (the first ``skip_games``) did not come from. A multiple of 6 keeps the types balanced."""
    actor: str | None = "finetuned:alfworld"
    """Actor LLM URI (the fine-tuned actor by default; None: the base SmolLM2)."""
    reflector: str | None = None
    """Reflection LLM URI (None: the base SmolLM2, the reflector the DPO run starts from)."""
    examples: int | None = None
    """Few-shot examples in the actor's prompt (None: the actor model's own setting, else 2)."""
    reflections: int = 4
    """Reflections sampled per failed first attempt (each gets its own next attempt)."""
    temperature: float = 0.8
    """Sampling temperature of the reflections."""
    max_steps: int = 50
    """Environment steps per attempt."""
    n_threads: int = 1
    """llama.cpp threads."""
    seed: int = 0
    """Seed of the reflection samples (sample k uses seed + k)."""

    def validate(self) -> "ReflectionDataConfig":
        for name in ("games", "reflections", "max_steps", "n_threads"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if not isinstance(self.skip_games, int) or self.skip_games < 0:
            raise ValueError(f"skip_games: expected an int >= 0, got {self.skip_games!r}")
        if not self.temperature > 0:
            raise ValueError(f"temperature: expected > 0 (the reflections must differ), got {self.temperature}")
        if self.split in ("valid_train", "valid_unseen", "heldout_rooms"):
            raise ValueError(f"split: {self.split} is an evaluation split; collect on valid_seen or train")
        return self


def claim_collection(out_dir: str | Path, config: dict[str, Any], resizable: tuple[str, ...] = (),
                     defaults: dict[str, Any] | None = None) -> Path:
    """Make (or reopen) a per-game collection folder (``games/`` beside ``config.json``); a folder
    holding a collection of another configuration is refused, so a rerun resumes only its own.
    ``resizable``: fields that only say how many games of a fixed order are played (``games``), so
    that a collection may be grown, or cut short, by rerunning it with another count; the folder's
    config.json then holds the latest count. ``defaults``: the configuration's defaults, taken for
    fields added since a folder's config.json was written."""
    out = Path(out_dir)
    (out / "games").mkdir(parents=True, exist_ok=True)
    conf_path = out / "config.json"
    if conf_path.exists():
        was = {**(defaults or {}), **read_json(conf_path)}
        drop = lambda c: {k: v for k, v in c.items() if k not in resizable}  # noqa: E731
        if drop(was) != drop(config):
            raise ValueError(f"{conf_path}: the folder holds a collection of another configuration; use another --out")
    write_json_atomic(conf_path, config)
    return out


def claim_identity(out: Path, identity: dict[str, Any]) -> None:
    """Before a collection plays more games: ``identity`` (the models behind its URIs,
    :func:`~metacog_fast.llm.models.models_identity`) must equal the ``identity.json`` of the games
    already there (a name such as ``finetuned:alfworld`` may have been given to another model since).
    The first games write it; a collection played before identities were recorded (games but no
    identity.json) stays unchecked."""
    path = out / "identity.json"
    if path.exists():
        from metacog_fast.runs.folder import identity_differences

        diff = identity_differences(read_json(path), identity)
        if diff:
            raise ValueError(f"{path}: {diff}; use another --out")
    elif not any((out / "games").iterdir()):
        write_json_atomic(path, identity)


def _open(uri: str | None, cfg: ReflectionDataConfig) -> Any:
    from metacog_fast.llm import open_llm

    return open_llm(uri, n_threads=cfg.n_threads, n_ctx=8192, seed=cfg.seed)


def _actor_examples(cfg: ReflectionDataConfig) -> int:
    from metacog_fast.alfworld.finetune.evaluate import EvalConfig, _examples_for

    return _examples_for(EvalConfig(llm=cfg.actor, examples=cfg.examples))


def play_game(game: dict[str, str], cfg: ReflectionDataConfig, actor: Any, reflector: Any, env: Any,
              agent: Any, memory: Any) -> dict[str, Any]:
    """The record of one game: the first attempt, and each sampled reflection with its next attempt."""
    from metacog_fast.alfworld.episode import run_episode
    from metacog_fast.alfworld.prompts import reflection_messages

    t0 = time.perf_counter()
    memory.clear(game["game"])
    first = run_episode(env, agent, actor, game["game"], game["gamefile"], 0, "adapt", cfg.max_steps)
    rec: dict[str, Any] = {"game": game["game"], "task_type": game["task_type"], "task": first["task"],
                           "first": {"won": first["won"], "steps": first["steps"]}, "reflections": []}
    if not first["won"]:
        pairs = [tuple(p) for p in first["pairs"]]
        messages = reflection_messages(first["task"], pairs, False)
        rec["messages"] = messages
        seen: set[str] = set()
        for k in range(cfg.reflections):
            out = reflector.chat(messages, max_tokens=agent.cfg.reflection_max_tokens,
                                 temperature=cfg.temperature, seed=cfg.seed + k)
            text = " ".join(out[0].text.split())
            if not text or text in seen:  # an empty or repeated sample teaches nothing new
                rec["reflections"].append({"text": text, "sample": k, "skipped": "empty" if not text else "repeat"})
                continue
            seen.add(text)
            memory.clear(game["game"])
            memory.add(game["game"], 0, text)
            nxt = run_episode(env, agent, actor, game["game"], game["gamefile"], 1, "adapt", cfg.max_steps)
            rec["reflections"].append({"text": text, "sample": k, "next_won": nxt["won"], "next_steps": nxt["steps"]})
    memory.clear(game["game"])
    rec["seconds"] = time.perf_counter() - t0
    return rec


def preference_pairs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every (won-next, failed-next) pair of reflections of one game's failed first attempt."""
    out = []
    for r in records:
        played = [x for x in r["reflections"] if "next_won" in x]
        good = [x for x in played if x["next_won"]]
        bad = [x for x in played if not x["next_won"]]
        for g, b in itertools.product(good, bad):
            out.append({"game": r["game"], "task_type": r["task_type"], "messages": r["messages"],
                        "chosen": g["text"], "rejected": b["text"]})
    return out


def quality(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Reflection quality: the success of the attempts that follow the reflections, with a Wilson
    interval over attempts and the per-game mean (games weigh equally)."""
    from metacog_fast.metrics.intervals import rate_with_interval

    played = [x for r in records for x in r["reflections"] if "next_won" in x]
    per_game = [sum(x["next_won"] for x in r["reflections"] if "next_won" in x) /
                max(1, sum(1 for x in r["reflections"] if "next_won" in x))
                for r in records if any("next_won" in x for x in r["reflections"])]
    return {"next_attempts": rate_with_interval([bool(x["next_won"]) for x in played]) if played else None,
            "games_with_failed_first": len(per_game),
            "per_game_mean": sum(per_game) / len(per_game) if per_game else None}


def collection_games(cfg: ReflectionDataConfig) -> list[dict[str, str]]:
    """The games a collection plays: ``games`` of the split's round-robin order after the first
    ``skip_games``."""
    from metacog_fast.alfworld.protocol import select_games

    return select_games(cfg.split, cfg.skip_games + cfg.games)[cfg.skip_games:]


def per_game_quality(records: list[dict[str, Any]]) -> dict[str, float]:
    """Game -> success rate of the attempts that followed its reflections (games whose first attempt
    failed and had at least one reflection played)."""
    out = {}
    for r in records:
        played = [x["next_won"] for x in r["reflections"] if "next_won" in x]
        if played:
            out[r["game"]] = sum(map(bool, played)) / len(played)
    return out


def compare_reflectors(a_dir: str | Path, b_dir: str | Path, resamples: int = 10000) -> dict[str, Any]:
    """Reflection quality of two collections on the same games (A - B): each side's next-attempt
    success with its Wilson interval, and the game-paired difference of the per-game rates (paired
    bootstrap, sign-flip p-value). The same greedy actor fails the same first attempts, so both
    sides reflect on the same games; a game only one side reflected on is left out and counted. Each
    side's model identities (its identity.json, by content) come with the result."""
    from metacog_fast.metrics import compare_paired

    sides, configs, identities = [], [], []
    for d in (a_dir, b_dir):
        root = Path(d)
        if not (root / "config.json").is_file():
            raise ValueError(f"compare: {root} is not a reflection collection (no config.json)")
        configs.append(read_json(root / "config.json"))
        identities.append(read_json(root / "identity.json") if (root / "identity.json").is_file() else None)
        sides.append([read_json(p) for p in sorted((root / "games").glob("*.json"))])
    qa, qb = per_game_quality(sides[0]), per_game_quality(sides[1])
    games = sorted(set(qa) & set(qb))
    if len(games) < 2:
        raise ValueError(f"compare: the two collections share {len(games)} games with reflections; expected at least 2")
    cfg_a, cfg_b = configs
    if cfg_a.get("actor") != cfg_b.get("actor"):
        raise ValueError(f"compare: the collections have different actors ({cfg_a.get('actor')!r}, "
                         f"{cfg_b.get('actor')!r}); reflection quality is compared with one actor")
    return {"a": str(a_dir), "b": str(b_dir), "reflector_a": cfg_a.get("reflector"), "reflector_b": cfg_b.get("reflector"),
            "identity_a": identities[0], "identity_b": identities[1], "actor": cfg_a.get("actor"), "games": len(games),
            "games_only_a": len(set(qa) - set(qb)), "games_only_b": len(set(qb) - set(qa)),
            "quality_a": quality([r for r in sides[0] if r["game"] in games]),
            "quality_b": quality([r for r in sides[1] if r["game"] in games]),
            "paired": compare_paired({g: qa[g] for g in games}, {g: qb[g] for g in games}, resamples=resamples).to_dict()}


def collect(out_dir: str | Path, cfg: ReflectionDataConfig) -> dict[str, Any]:
    """Collect (or resume) into ``out_dir``; returns the manifest."""
    from tqdm import tqdm

    from metacog_fast.alfworld.config import AgentConfig
    from metacog_fast.alfworld.fewshot import load_examples
    from metacog_fast.alfworld.memory import ReflectionMemory
    from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT, make_agent
    from metacog_fast.envs import make_env
    from metacog_fast.scoring import MiniLMEncoder

    cfg.validate()
    from metacog_fast.llm.models import models_identity

    out = claim_collection(out_dir, asdict(cfg), resizable=("games",))  # games: a prefix of one order
    games = collection_games(cfg)
    todo = [g for g in games if not (out / "games" / f"{g['game']}.json").exists()]
    if todo:
        claim_identity(out, models_identity(actor=cfg.actor, reflector=cfg.reflector))
        ac = AgentConfig(max_steps=cfg.max_steps, examples=_actor_examples(cfg), seed=cfg.seed)
        actor = _open(cfg.actor, cfg)
        reflector = _open(cfg.reflector, cfg) if cfg.reflector != cfg.actor else actor
        encoder = MiniLMEncoder()
        memory = ReflectionMemory(out / "memory.db", encoder)
        env = make_env("alfworld", split=cfg.split, max_episode_steps=cfg.max_steps)
        agent = make_agent("reflexion", actor, load_examples(DEFAULT_FEWSHOT, ac.examples, ac.example_max_steps),
                           ac, encoder, memory)
        try:
            for g in tqdm(todo, desc="reflection games"):
                write_json_atomic(out / "games" / f"{g['game']}.json", play_game(g, cfg, actor, reflector, env, agent, memory))
        finally:
            env.close()
            memory.close()
            if reflector is not actor:
                reflector.close()
            actor.close()
    records = [read_json(out / "games" / f"{g['game']}.json") for g in games]
    pairs = preference_pairs(records)
    with open(out / "pairs.jsonl.tmp", "w") as f:
        for p in pairs:
            f.write(json.dumps(p) + "\n")
    (out / "pairs.jsonl.tmp").replace(out / "pairs.jsonl")
    manifest = {"config": asdict(cfg), "games": len(records),
                "first_attempt_wins": sum(r["first"]["won"] for r in records),
                "pairs": len(pairs), "games_with_pairs": len({p["game"] for p in pairs}),
                "quality": quality(records), "pairs_sha256": sha256_file(out / "pairs.jsonl")}
    write_json_atomic(out / "manifest.json", manifest)
    return manifest
