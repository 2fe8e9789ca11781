"""Evaluation of an actor as a ReAct agent on ALFWorld games, with intervals.

The run goes through the protocol runner of :mod:`metacog_fast.alfworld.protocol`
(resumable episode records), with no adaptation episodes; the summary gives the success rate
with its Wilson 95 % interval, per task type too, and the mean steps (a failure charged 100).
:func:`compare` pairs two evaluations game by game (exact McNemar test, paired bootstrap).

Layout: ``run/`` (the protocol's run folder), ``summary.json``, ``summary.md``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from metacog_fast.alfworld.store import read_json, write_json_atomic
from metacog_fast.alfworld.env import TASK_TYPES


@dataclass
class EvalConfig:
    """One evaluation of an actor on ALFWorld."""

    llm: str | None = None
    """LLM URI: e.g. finetuned:alfworld, llama-cpp:///path/to/export (None: the base SmolLM2)."""
    examples: int | None = None
    """Few-shot examples in the prompt (None: the fine-tuned model's own setting, else 2)."""
    split: str = "valid_train"
    """Evaluation split (never a split the actor was trained on)."""
    tasks: int = 60
    """Games, round-robin over the six task types."""
    episodes: int = 1
    """Test episodes per game (greedy decoding: repeats are identical unless memory changes them)."""
    max_steps: int = 50
    """Environment steps per episode."""
    map_actions: str = "none"
    """Admissible-action mapping: "none" (the text is sent as is), "embed" or "choose"."""
    n_threads: int = 1
    """llama.cpp threads per worker."""
    workers: int = 2
    """Worker processes (games split by task type)."""
    seed: int = 0
    """Sampling seed."""


def _examples_for(cfg: EvalConfig) -> int:
    """The examples of the actor's prompt: the config's, else the fine-tuned model's own, else 2."""
    if cfg.examples is not None:
        return cfg.examples
    from metacog_fast.llm.models import trained_examples

    k = trained_examples(cfg.llm)
    return 2 if k is None else k


def summarize(run_dir: str | Path) -> dict[str, Any]:
    """Success (Wilson 95 %), per task type, steps and token costs of a run folder's test episodes."""
    from metacog_fast.metrics import mean_steps_charged, rate_with_interval

    root = Path(run_dir)
    records = [read_json(p) for p in sorted(root.glob("episodes/*/test_*.json"))]
    if not records:
        raise ValueError(f"{root}: no test episodes recorded yet")
    won = [bool(r["won"]) for r in records]
    out: dict[str, Any] = {"episodes": len(records), "games": len({r["game"] for r in records}),
                           "success": rate_with_interval(won),
                           "mean_steps_charged": mean_steps_charged([r["steps"] for r in records], won),
                           "by_task_type": {}, "per_game": {}}
    for t in TASK_TYPES:
        sel = [bool(r["won"]) for r in records if r["task_type"] == t]
        if sel:
            out["by_task_type"][t] = rate_with_interval(sel)
    for r in records:
        out["per_game"].setdefault(r["game"], []).append(bool(r["won"]))
    out["llm_tokens"] = {"prompt": sum(r["llm"]["prompt_tokens"] for r in records),
                         "completion": sum(r["llm"]["completion_tokens"] for r in records)}
    out["mapped_share"] = _mapped_share(records)
    return out


def _mapped_share(records: list[dict[str, Any]]) -> dict[str, float]:
    hows: dict[str, int] = {}
    for r in records:
        for s in r["step_log"]:
            hows[s["how"]] = hows.get(s["how"], 0) + 1
    n = sum(hows.values()) or 1
    return {k: v / n for k, v in sorted(hows.items())}


def _table(s: dict[str, Any], title: str) -> str:
    def row(name: str, r: dict[str, Any]) -> str:
        return f"| {name} | {r['successes']}/{r['n']} | {100 * r['rate']:.1f} % | [{100 * r['low']:.1f}, {100 * r['high']:.1f}] |"

    lines = [f"### {title}", "", "| task type | won | success | Wilson 95 % |", "|---|---|---|---|",
             row("**all**", s["success"])]
    lines += [row(t, r) for t, r in s["by_task_type"].items()]
    lines += ["", f"Mean steps (failure = 100): {s['mean_steps_charged']:.1f}; games {s['games']}, "
                  f"episodes {s['episodes']}; tokens {s['llm_tokens']['prompt']} prompt / "
                  f"{s['llm_tokens']['completion']} completion; action mapping {s['mapped_share']}", ""]
    return "\n".join(lines)


def evaluate(out_dir: str | Path, cfg: EvalConfig) -> dict[str, Any]:
    """Run (or resume) the evaluation into ``out_dir``; returns the summary."""
    from metacog_fast.alfworld.config import AgentConfig, RunConfig
    from metacog_fast.alfworld.protocol import DEFAULT_FEWSHOT, run_protocol

    out = Path(out_dir)
    examples = _examples_for(cfg)
    ac = AgentConfig(max_steps=cfg.max_steps, examples=examples, map_actions=cfg.map_actions, seed=cfg.seed)
    rc = RunConfig(agent="react", split=cfg.split, tasks=cfg.tasks, adapt_episodes=0, test_episodes=cfg.episodes,
                   llm=cfg.llm, n_threads=cfg.n_threads, workers=cfg.workers, agent_config=ac)
    played = run_protocol(out / "run", rc, DEFAULT_FEWSHOT)
    s = summarize(out / "run")
    s["config"] = {**asdict(cfg), "examples_used": examples}
    s["wall_seconds_this_call"] = played["wall_seconds"]
    write_json_atomic(out / "summary.json", s)
    (out / "summary.md").write_text(_table(s, f"{cfg.llm or 'base SmolLM2-135M'} on {cfg.split}"))
    return {k: v for k, v in s.items() if k != "per_game"}


@dataclass
class ExpertEvalConfig:
    """ALFWorld's hand-coded expert on the evaluation games (the same games ``eval`` plays)."""

    split: str = "valid_train"
    """Evaluation split."""
    tasks: int = 60
    """Games, round-robin over the six task types (the order of ``metacog finetune eval``)."""
    max_steps: int = 50
    """Environment steps per episode."""


def evaluate_expert(out_dir: str | Path, cfg: ExpertEvalConfig) -> dict[str, Any]:
    """Play the hand-coded expert on the evaluation games: the success an actor that imitated it
    perfectly would have (its ceiling), with Wilson intervals; per game in ``episodes.jsonl``."""
    import json
    import time

    from metacog_fast._atomic import atomic_open
    from metacog_fast.alfworld.protocol import select_games
    from metacog_fast.envs import make_env
    from metacog_fast.alfworld.finetune.data import play_handcoded
    from metacog_fast.metrics import mean_steps_charged, rate_with_interval

    if cfg.tasks < 1 or cfg.max_steps < 1:
        raise ValueError(f"tasks, max_steps: expected positive ints, got {cfg.tasks}, {cfg.max_steps}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    env = make_env("alfworld", split=cfg.split, max_episode_steps=cfg.max_steps, handcoded_expert=True)
    try:
        records = []
        for g in select_games(cfg.split, cfg.tasks):
            r = play_handcoded(env, Path(g["gamefile"]), cfg.split)
            records.append({"game": g["game"], "task_type": r["task_type"], "won": r["won"], "steps": len(r["pairs"]),
                            "gave_up": r["expert_gave_up"], "actions": [a for a, _ in r["pairs"]]})
    finally:
        env.close()
    with atomic_open(out / "episodes.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    won = [bool(r["won"]) for r in records]
    s: dict[str, Any] = {
        "actor": "alfworld hand-coded expert (HandCodedTWAgent)", "episodes": len(records), "games": len(records),
        "success": rate_with_interval(won), "mean_steps_charged": mean_steps_charged([r["steps"] for r in records], won),
        "by_task_type": {t: rate_with_interval([bool(r["won"]) for r in records if r["task_type"] == t])
                         for t in TASK_TYPES if any(r["task_type"] == t for r in records)},
        "per_game": {r["game"]: [bool(r["won"])] for r in records},
        "config": asdict(cfg), "wall_seconds": time.perf_counter() - t0,
    }
    write_json_atomic(out / "summary.json", s)
    (out / "summary.md").write_text(_table({**s, "llm_tokens": {"prompt": 0, "completion": 0}, "mapped_share": {}},
                                           f"hand-coded expert on {cfg.split}"))
    return {k: v for k, v in s.items() if k != "per_game"}


def compare(a_dir: str | Path, b_dir: str | Path) -> dict[str, Any]:
    """Game-paired comparison of two evaluations (A - B): exact McNemar on the games both played
    (first test episode), a paired bootstrap of the per-game success rates, and McNemar within each
    task type (with each side's wins)."""
    from metacog_fast.metrics import mcnemar_exact, paired_bootstrap

    a = read_json(Path(a_dir) / "summary.json")["per_game"]
    b = read_json(Path(b_dir) / "summary.json")["per_game"]
    games = sorted(set(a) & set(b))
    if len(games) < 2:
        raise ValueError(f"compare: the two evaluations share {len(games)} games; expected at least 2")
    ra = [sum(a[g]) / len(a[g]) for g in games]
    rb = [sum(b[g]) / len(b[g]) for g in games]
    by_type = {}
    for t in TASK_TYPES:  # game keys begin with their task type's folder name
        gs = [g for g in games if g.startswith(t)]
        if gs:
            by_type[t] = {"games": len(gs), "a_won": sum(a[g][0] for g in gs), "b_won": sum(b[g][0] for g in gs),
                          **mcnemar_exact([a[g][0] for g in gs], [b[g][0] for g in gs])}
    return {"a": str(a_dir), "b": str(b_dir), "games": len(games),
            "mcnemar": mcnemar_exact([a[g][0] for g in games], [b[g][0] for g in games]),
            "paired_bootstrap": paired_bootstrap(ra, rb), "by_task_type_mcnemar": by_type}
