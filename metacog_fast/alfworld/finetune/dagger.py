"""DAgger data for the ALFWorld actor: the hand-coded expert labels the states the actor reaches.

Imitation of successful episodes only ever shows the expert's own states; the actor fails once it is
off them (a wrong receptacle, then a loop). DAgger (Ross et al., "A Reduction of Imitation Learning
and Structured Prediction to No-Regret Online Learning"; ALFWorld's own text agents are trained
this way) plays the *actor* and asks the expert, at every state, what it would do there:

* at each step the actor proposes its command (ReAct, greedy, exactly as in evaluation) and the
  hand-coded expert (:mod:`metacog_fast.alfworld.expert`) gives its label for the same state;
* if they agree, that command is taken; if not, the expert's is taken with probability ``beta``
  (DAgger's mixture policy) and the actor's otherwise, so the episode visits the actor's mistakes
  and the expert's recoveries from them;
* the example is the transcript of the executed commands, and the loss is taken only on the steps
  whose executed command *is* the expert's label: a mistake stays in the history as context, never
  as a target.

Layout (resumable; one record per game, atomic)::

    games/<game key>.json   executed pairs, expert labels, actor proposals, loss steps, won
    dataset.jsonl           source ``alfworld_dagger`` examples (a dataset folder SFT reads)
    manifest.json           config, counts, the actor's agreement with the expert, sha256
    identity.json           the hashes of the actor model behind the URI (a resume must match them)
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from metacog_fast._atomic import atomic_open
from metacog_fast.alfworld.fewshot import strip_intro
from metacog_fast.alfworld.protocol import game_key
from metacog_fast.alfworld.store import read_json, write_json_atomic
from metacog_fast.alfworld.finetune.data import HELD_OUT_SPLITS, select_walkthrough_games
from metacog_fast.envs.driver import Step, play
from metacog_fast.finetune.base import sha256_file
from metacog_fast.alfworld.finetune.reflections import claim_collection, claim_identity


@dataclass
class DaggerConfig:
    """One DAgger collection."""

    actor: str | None = "finetuned:alfworld"
    """LLM URI of the actor whose states are labelled (None: the base SmolLM2)."""
    split: str = "train"
    """ALFWorld split played (never the evaluation split valid_train, never valid_unseen)."""
    max_games: int | None = 120
    """Games, round-robin over the six task types (the walkthrough datasets' order)."""
    skip_games: int = 0
    """Leave out the first this-many games of that order (disjoint from an earlier collection)."""
    beta: float = 0.5
    """Probability that the expert's command is executed where the actor's differs."""
    max_steps: int = 50
    """Environment steps per episode (the evaluation's length)."""
    examples: int | None = None
    """Few-shot examples in the actor's prompt (None: the actor model's own setting, else 2)."""
    n_threads: int = 1
    """llama.cpp threads."""
    seed: int = 0
    """Seed of the mixture draws (per game: seed and game key)."""
    exclude_heldout_rooms: bool = False
    """Play no game of the held-out rooms (:mod:`metacog_fast.alfworld.splits`; see DataConfig)."""

    def validate(self) -> "DaggerConfig":
        if self.split in HELD_OUT_SPLITS or self.split == "valid_train":
            raise ValueError(f"split: {self.split!r} is held out or the evaluation split; collect on train or valid_seen")
        if not 0.0 <= self.beta <= 1.0:
            raise ValueError(f"beta: expected a probability in [0, 1], got {self.beta!r}")
        for name in ("max_steps", "n_threads"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if self.max_games is not None and (not isinstance(self.max_games, int) or self.max_games < 1):
            raise ValueError(f"max_games: expected None or an int >= 1, got {self.max_games!r}")
        return self


def play_dagger_game(env: Any, agent: Any, gamefile: Path, cfg: DaggerConfig) -> dict[str, Any]:
    """One DAgger episode of ``gamefile`` (``env`` made with ``handcoded_expert=True``)."""
    from metacog_fast.alfworld.agents import EpisodeContext

    t0 = time.perf_counter()
    rng = random.Random(f"{cfg.seed}:{game_key(gamefile)}")
    obs, info = env.reset(game=str(gamefile))
    task = info["task"] if info["task"].startswith("Your task") else f"Your task is to: {info['task']}"
    agent.begin(EpisodeContext(game=game_key(gamefile), task=task, task_type=info["task_type"],
                               intro=strip_intro(obs), episode=0))
    steps: list[dict[str, Any]] = []
    loss_steps: list[int] = []

    def policy(obs: str, info: dict[str, Any]) -> str:
        label = env.handcoded_action()
        n_thinks = len(agent.lines)
        dec = agent.act(info.get("admissible"))
        thinks = agent.lines[n_thinks:]
        proposed = dec.action
        if label is None or proposed == label:
            taken, by = proposed, ("agreed" if label is not None else "actor")
        else:
            taken, by = (label, "expert") if rng.random() < cfg.beta else (proposed, "actor")
        steps.append({"taken": taken, "by": by, "label": label, "proposed": proposed, "thinks": len(thinks)})
        return taken

    def observe(step: Step) -> None:
        agent.observe(step.action, " ".join(step.obs.split()))
        if steps[-1]["by"] in ("agreed", "expert"):
            loss_steps.append(len(agent.lines) - 1)

    info = play(env, policy, cfg.max_steps, start=(obs, info), stop_on_success=True, on_step=observe).info
    # Thoughts stay in the transcript exactly as the actor saw them (as ``think: ...`` / ``OK.`` lines).
    return {"id": f"alfworld_dagger/{cfg.split}/{game_key(gamefile)}", "source": "alfworld_dagger",
            "split": cfg.split, "gamefile": str(Path(*gamefile.parts[-3:])), "task_type": info["task_type"],
            "intro": agent.ctx.intro, "pairs": [list(p) for p in agent.lines], "loss_steps": loss_steps,
            "steps": steps, "won": bool(info.get("won")), "expert_gave_up": env._expert.gave_up,
            "seconds": time.perf_counter() - t0}


def folder_config(out_dir: str | Path) -> DaggerConfig:
    """The configuration a collection folder was started with (its ``config.json``)."""
    path = Path(out_dir) / "config.json"
    if not path.is_file():
        raise ValueError(f"out: {path} not found; --resume needs a collection folder (start one without --resume)")
    d = read_json(path)
    known = set(DaggerConfig.__dataclass_fields__)
    if not isinstance(d, dict) or set(d) - known:
        raise ValueError(f"out: {path} is not a DAgger configuration (fields {sorted(set(d) - known) if isinstance(d, dict) else d!r})")
    return DaggerConfig(**d)


def play_missing_games(out: Path, games: list[Path], actor_uri: str | None, examples: int | None, split: str,
                       max_steps: int, n_threads: int, seed: int, play: Any, desc: str) -> None:
    """Play each of ``games`` not yet in ``out/games`` with a ReAct actor (``actor_uri``, greedy, no
    action mapping) on an ALFWorld env with the hand-coded expert; ``play(env, agent, gamefile)``
    returns the game's record, written atomically. The actor is opened only if a game is missing,
    after checking it is the one the folder's games were played with."""
    from tqdm import tqdm

    from metacog_fast.alfworld.actions import ActionMapper
    from metacog_fast.alfworld.agents import ReActAgent
    from metacog_fast.alfworld.config import AgentConfig
    from metacog_fast.alfworld.env import task_type_of
    from metacog_fast.alfworld.fewshot import load_examples
    from metacog_fast.alfworld.finetune.evaluate import EvalConfig, _examples_for
    from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT
    from metacog_fast.envs import make_env
    from metacog_fast.llm import open_llm
    from metacog_fast.llm.models import models_identity

    todo = [g for g in games if not (out / "games" / f"{game_key(g)}.json").exists()]
    if not todo:
        return
    claim_identity(out, models_identity(actor=actor_uri))
    k = _examples_for(EvalConfig(llm=actor_uri, examples=examples))
    ac = AgentConfig(max_steps=max_steps, examples=k, map_actions="none", seed=seed)
    shots = load_examples(DEFAULT_FEWSHOT, max(k, 1), ac.example_max_steps) if k else {}
    actor = open_llm(actor_uri, n_threads=n_threads, n_ctx=8192, seed=seed)
    env = make_env("alfworld", split=split, max_episode_steps=max_steps, handcoded_expert=True)
    try:
        for g in tqdm(todo, desc=desc, dynamic_ncols=True, mininterval=2.0):
            tt = task_type_of(g)
            agent = ReActAgent(actor, {tt: shots.get(tt, [])}, ac, ActionMapper("none"))
            write_json_atomic(out / "games" / f"{game_key(g)}.json", play(env, agent, g))
    finally:
        env.close()
        actor.close()


def collect_dagger(out_dir: str | Path, cfg: DaggerConfig) -> dict[str, Any]:
    """Collect (or resume) into ``out_dir``; returns the manifest."""
    cfg.validate()
    out = claim_collection(out_dir, asdict(cfg), defaults=asdict(DaggerConfig()))
    t0 = time.perf_counter()
    games = select_walkthrough_games(cfg.split, cfg.max_games, None, cfg.skip_games, cfg.exclude_heldout_rooms)
    play_missing_games(out, games, cfg.actor, cfg.examples, cfg.split, cfg.max_steps, cfg.n_threads, cfg.seed,
                       lambda env, agent, g: play_dagger_game(env, agent, g, cfg), "dagger games")
    records = [read_json(out / "games" / f"{game_key(g)}.json") for g in games]
    examples_out = [r for r in records if r["loss_steps"]]
    path = out / "dataset.jsonl"
    with atomic_open(path, "w") as f:
        for r in examples_out:
            f.write(json.dumps(r) + "\n")
    steps = [s for r in records for s in r["steps"]]
    labelled = [s for s in steps if s["label"] is not None]
    manifest = {
        "config": asdict(cfg), "games": len(records), "examples": len(examples_out),
        "episodes_won": sum(r["won"] for r in records),
        "steps": len(steps), "loss_steps": sum(len(r["loss_steps"]) for r in records),
        "steps_by": {k: sum(s["by"] == k for s in steps) for k in ("agreed", "expert", "actor")},
        "actor_agrees_with_expert": (sum(s["proposed"] == s["label"] for s in labelled) / len(labelled)) if labelled else None,
        "by_task_type": {t: sum(r["task_type"] == t for r in examples_out) for t in sorted({r["task_type"] for r in records})},
        "dataset_sha256": sha256_file(path), "build_seconds": time.perf_counter() - t0,
    }
    write_json_atomic(out / "manifest.json", manifest)
    return manifest


__all__ = ["DaggerConfig", "collect_dagger", "play_dagger_game", "play_missing_games"]
