"""Step labels for a self-assessment that judges an action, not an episode (issue 49 item 2).

MUSE's M_sa is trained on episode outcomes: every chunk of a won episode is a positive. Such a
label says nothing about which of one step's candidate actions is better, and run 3's M_sa could
not tell them apart. ALFWorld's hand-coded expert (:mod:`metacog_fast.alfworld.expert`) decides
from any state which command it would take next, so the states an actor reaches can be labelled
step by step:

* the actor plays on policy, exactly as a ReAct evaluation (greedy, the expert never acts), so the
  states are the ones MUSE meets;
* at each step the expert gives its command for the state (``label``); the actor's greedy action
  is candidate 0 and ``candidates - 1`` more are sampled from the same prompt at ``temperature``
  (MUSE's candidates, decoded together, seeded by (seed, game, step));
* every distinct candidate and the expert's command are scored by the actor in one call: the total
  log-likelihood of ``" <command>\\n"`` after the prompt (the actor's own confidence, the trivial
  predictor an assessor must beat);
* a candidate's step label is 1 when it is the expert's command, else 0.

The expert is one good policy, not the only one (it searches receptacles in a fixed prior order):
a label 0 can be a harmless detour. :mod:`metacog_fast.alfworld.finetune.step_assessor` reports the
candidate-ranking accuracy against the expert with this said.

Layout (resumable; one record per game, atomic)::

    games/<game key>.json   steps (label, taken, candidates with their log-likelihoods), won
    manifest.json           config, counts, how often the greedy action is the expert's, how often
                            any candidate is
    identity.json           the hashes of the actor model behind the URI (a resume must match them)
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from metacog_fast.alfworld.protocol import game_key
from metacog_fast.alfworld.store import read_json, write_json_atomic


@dataclass
class StepLabelConfig:
    """One step-label collection."""

    actor: str | None = "finetuned:alfworld"
    """LLM URI of the actor whose states are labelled (None: the base SmolLM2)."""
    split: str = "valid_seen"
    """ALFWorld split played: ``train`` (an assessor's training data), ``valid_seen`` (tuning) or
    ``valid_train`` (report); never ``valid_unseen`` or the held-out rooms."""
    max_games: int | None = 60
    """Games, round-robin over the six task types (the evaluation's order: the first 60 of
    ``valid_train`` are the protocol runs' games)."""
    skip_games: int = 0
    """Leave out the first this-many games of that order (to split a collection over processes)."""
    candidates: int = 5
    """Candidate actions per step: the greedy one and ``candidates - 1`` samples (MUSE's rollouts)."""
    temperature: float = 0.5
    """Sampling temperature of candidates 1.. (MUSE's ``rollout_temperature``)."""
    max_steps: int = 50
    """Environment steps per episode (the evaluation's length)."""
    n_threads: int = 1
    """llama.cpp threads."""
    seed: int = 0
    """Seed of the candidates' sampling (per step: seed, game and step)."""

    def validate(self) -> "StepLabelConfig":
        from metacog_fast.alfworld.finetune.data import HELD_OUT_SPLITS

        if self.split in HELD_OUT_SPLITS:
            raise ValueError(f"split: {self.split!r} is held out; label train, valid_seen or valid_train")
        if not isinstance(self.candidates, int) or self.candidates < 1:
            raise ValueError(f"candidates: expected an int >= 1, got {self.candidates!r}")
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0.0):
            raise ValueError(f"temperature: expected a number >= 0, got {self.temperature!r}")
        for name in ("max_steps", "n_threads"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if self.max_games is not None and (not isinstance(self.max_games, int) or self.max_games < 1):
            raise ValueError(f"max_games: expected None or an int >= 1, got {self.max_games!r}")
        if not isinstance(self.skip_games, int) or self.skip_games < 0:
            raise ValueError(f"skip_games: expected an int >= 0, got {self.skip_games!r}")
        return self


def command_option(command: str) -> str:
    """The text an actor's action line continues its prompt (which ends in ``>``) with."""
    return f" {command}\n"


def sample_candidates(llm: Any, prompt: str, greedy: str, n: int, temperature: float, seed: int,
                      max_tokens: int) -> tuple[list[str], list[int]]:
    """The step's distinct candidate actions, the greedy one first, and how many of the ``n``
    draws gave each (the greedy draw counts once). Samples that are empty or a think are dropped."""
    from metacog_fast.alfworld.actions import clean_action, is_think

    found: dict[str, int] = {greedy: 1}
    if n > 1:
        outs = llm.generate_many([prompt] * (n - 1), temperature=temperature, max_tokens=max_tokens, stop=["\n"],
                                 seed=[(seed + 1 + i) % (2**31 - 1) for i in range(n - 1)])
        for o in outs:
            text = o.text.split("\n", 1)[0]
            a = clean_action(text)
            if a and not is_think(text):
                found[a] = found.get(a, 0) + 1
    return list(found), list(found.values())


def play_labelled_game(env: Any, agent: Any, gamefile: Path, cfg: StepLabelConfig) -> dict[str, Any]:
    """One on-policy episode of ``gamefile`` (``env`` made with ``handcoded_expert=True``) with the
    expert's label, the candidates and their log-likelihoods at every step."""
    from metacog_fast.alfworld.agents import EpisodeContext
    from metacog_fast.alfworld.config import step_seed
    from metacog_fast.alfworld.fewshot import strip_intro
    from metacog_fast.envs.driver import Step, play

    t0 = time.perf_counter()
    key = game_key(gamefile)
    obs, info = env.reset(game=str(gamefile))
    task = info["task"] if info["task"].startswith("Your task") else f"Your task is to: {info['task']}"
    agent.begin(EpisodeContext(game=key, task=task, task_type=info["task_type"], intro=strip_intro(obs), episode=0))
    steps: list[dict[str, Any]] = []

    def policy(obs: str, info: dict[str, Any]) -> str:
        label = env.handcoded_action()
        dec = agent.act(info.get("admissible"))  # greedy; think lines join the history as in evaluation
        prompt = agent.prompt()  # after any thinks: the position of the action line
        t = len(steps)
        cands, counts = sample_candidates(agent.llm, prompt, dec.action, cfg.candidates, cfg.temperature,
                                          step_seed(cfg.seed, key, 0, t), agent.cfg.action_max_tokens)
        scored = cands + ([label] if label is not None and label not in cands else [])
        ll = agent.llm.choose(prompt, [command_option(c) for c in scored]).logprobs
        steps.append({
            "t": t, "label": label, "taken": dec.action,
            "candidates": [{"action": c, "draws": k, "loglik": float(ll[i]),
                            "label": None if label is None else int(c == label)}
                           for i, (c, k) in enumerate(zip(cands, counts))],
            "label_loglik": None if label is None else float(ll[scored.index(label)]),
            "greedy_logprob": dec.info.get("action_logprob"),
        })
        return dec.action

    def observe(step: Step) -> None:
        agent.observe(step.action, " ".join(step.obs.split()))

    info = play(env, policy, cfg.max_steps, start=(obs, info), stop_on_success=True, on_step=observe).info
    return {"game": key, "gamefile": str(Path(*Path(gamefile).parts[-3:])), "split": cfg.split, "task": task,
            "task_type": info["task_type"], "pairs": [list(p) for p in agent.lines], "steps": steps,
            "won": bool(info.get("won")), "expert_gave_up": env._expert.gave_up,
            "seconds": time.perf_counter() - t0}


def summarize_games(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts of a collection: steps, labelled steps, how often the greedy candidate is the expert's
    command and how often any candidate is (Wilson 95 % intervals over steps)."""
    from metacog_fast.metrics import rate_with_interval

    steps = [s for r in records for s in r["steps"]]
    lab = [s for s in steps if s["label"] is not None]
    greedy = [s["candidates"][0]["label"] for s in lab]
    anyc = [int(any(c["label"] for c in s["candidates"])) for s in lab]
    multi = [s for s in lab if len(s["candidates"]) > 1]
    return {
        "games": len(records), "episodes_won": sum(r["won"] for r in records), "steps": len(steps),
        "labelled_steps": len(lab),
        "greedy_is_expert": rate_with_interval(greedy) if lab else None,
        "some_candidate_is_expert": rate_with_interval(anyc) if lab else None,
        "steps_with_several_candidates": len(multi),
        "mean_distinct_candidates": (sum(len(s["candidates"]) for s in steps) / len(steps)) if steps else None,
    }


def folder_config(out_dir: str | Path) -> StepLabelConfig:
    """The configuration a collection folder was started with (its ``config.json``)."""
    path = Path(out_dir) / "config.json"
    if not path.is_file():
        raise ValueError(f"out: {path} not found; --resume needs a collection folder (start one without --resume)")
    d = read_json(path)
    known = set(StepLabelConfig.__dataclass_fields__)
    if not isinstance(d, dict) or set(d) - known:
        raise ValueError(f"out: {path} is not a step-label configuration")
    return StepLabelConfig(**d)


def load_collection(out_dir: str | Path) -> list[dict[str, Any]]:
    """The game records of a collection folder, in a stable order."""
    files = sorted((Path(out_dir) / "games").glob("*.json"))
    if not files:
        raise ValueError(f"folders: {out_dir} holds no step-label games (expected games/*.json)")
    return [read_json(f) for f in files]


def collect_step_labels(out_dir: str | Path, cfg: StepLabelConfig) -> dict[str, Any]:
    """Collect (or resume) into ``out_dir``; returns the manifest."""
    from metacog_fast.alfworld.finetune.dagger import play_missing_games
    from metacog_fast.alfworld.finetune.data import select_walkthrough_games
    from metacog_fast.alfworld.finetune.reflections import claim_collection

    cfg.validate()
    out = claim_collection(out_dir, asdict(cfg), defaults=asdict(StepLabelConfig()))
    t0 = time.perf_counter()
    games = select_walkthrough_games(cfg.split, cfg.max_games, None, cfg.skip_games)
    play_missing_games(out, games, cfg.actor, None, cfg.split, cfg.max_steps, cfg.n_threads, cfg.seed,
                       lambda env, agent, g: play_labelled_game(env, agent, g, cfg), "step-label games")
    records = [read_json(out / "games" / f"{game_key(g)}.json") for g in games]
    manifest = {"config": asdict(cfg), **summarize_games(records), "build_seconds": time.perf_counter() - t0}
    write_json_atomic(out / "manifest.json", manifest)
    return manifest


__all__ = ["StepLabelConfig", "collect_step_labels", "command_option", "folder_config", "load_collection",
           "play_labelled_game", "sample_candidates", "summarize_games"]
