"""Protocol runner: adaptation + test episodes per game (Alg. 4), pre-deployment (Alg. 3).

Layout of a run folder::

    config.json                          RunConfig (a resumed run must match it)
    episodes/<game>/<phase>_<k>.json     one record per finished episode (atomic write)
    memory/<task_type>.db                reflections (MemoryStore) of that worker's games
    scorers/<game>/                      MUSE agents: g_eta after the game's adaptation episodes

Episodes are persisted as they end; a restarted run skips finished ones, rebuilds reflections
and lesson pools from the records, reloads or refits the adapted scorer, and goes on.
Work is split by task type (a type's games, hence its lesson pool, stay in one process) over
``workers`` processes (spawn).
"""
from __future__ import annotations

import multiprocessing as mp
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from metacog_fast.agents.alfworld.config import AgentConfig, RunConfig
from metacog_fast.agents.alfworld.fewshot import TASK_TYPES, load_examples
from metacog_fast.agents.alfworld.store import read_json, write_json_atomic

REPO = Path(__file__).resolve().parents[3]
DEFAULT_FEWSHOT = REPO / "results" / "alfworld" / "fewshot.json"


def game_key(gamefile: str | Path) -> str:
    p = Path(gamefile)
    return f"{p.parent.parent.name}__{p.parent.name}"


def select_games(split: str, n: int, data: str | None = None) -> list[dict[str, str]]:
    """``n`` games taken round-robin over the 6 task types (sorted game order inside a type)."""
    from metacog_fast.envs.alfworld_env import list_games, task_type_of

    by_type: dict[str, list[Path]] = {t: [] for t in TASK_TYPES}
    for g in list_games(split, data):
        t = task_type_of(g)
        if t in by_type:
            by_type[t].append(g)
    out: list[dict[str, str]] = []
    r = 0
    while len(out) < n:
        added = False
        for t in TASK_TYPES:
            if r < len(by_type[t]) and len(out) < n:
                g = by_type[t][r]
                out.append({"game": game_key(g), "gamefile": str(g), "task_type": t})
                added = True
        if not added:
            raise ValueError(f"tasks: split {split!r} has only {len(out)} games, {n} asked")
        r += 1
    return out


def episode_plan(cfg: RunConfig) -> list[tuple[str, int]]:
    """(phase, k) of a game's episodes in order: adaptation then test."""
    return [("adapt", k) for k in range(cfg.adapt_episodes)] + [("test", k) for k in range(cfg.test_episodes)]


def record_path(run_dir: Path, game: str, phase: str, k: int) -> Path:
    return run_dir / "episodes" / game / f"{phase}_{k}.json"


def load_records(run_dir: Path, game: str, plan: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    """Finished records of ``game`` in plan order, up to the first missing one."""
    out = []
    for phase, k in plan:
        p = record_path(run_dir, game, phase, k)
        if not p.exists():
            break
        out.append(read_json(p))
    return out


def chunk_examples(records: Sequence[dict[str, Any]], size: int = 4) -> list[dict[str, Any]]:
    """Training examples (task, plan, chunk, label) from episode records: chunks of ``size``
    pairs, each labelled with its episode's outcome (Alg. 3)."""
    from metacog_fast.scoring import chunk_episode

    ex = []
    for r in records:
        if not r["pairs"]:
            continue
        for c in chunk_episode([tuple(p) for p in r["pairs"]], size):
            ex.append({"task": r["task"], "plan": r.get("plan", ""), "chunk": c, "label": float(bool(r["won"]))})
    return ex


# -- building one worker's components ------------------------------------------------------------
def open_llm_for(cfg: RunConfig) -> Any:
    from metacog_fast.llm import open_llm

    uri = cfg.llm
    if uri is None or uri.startswith(("llama-cpp", "finetuned")):
        return open_llm(uri, n_threads=cfg.n_threads, n_ctx=cfg.n_ctx, seed=cfg.agent_config.seed)
    return open_llm(uri)


def make_agent(name: str, llm: Any, examples: dict[str, Any], ac: AgentConfig, encoder: Any,
               memory: Any, scorer: Any = None, record_plan: bool = False) -> Any:
    from metacog_fast.agents.alfworld.actions import ActionMapper
    from metacog_fast.agents.alfworld.agents import FcrfAgent, MuseAgent, ReActAgent, ReflexionAgent

    mapper = ActionMapper(ac.map_actions, encoder=encoder, llm=llm)
    if name == "react":
        return ReActAgent(llm, examples, ac, mapper)
    if name == "reflexion":
        return ReflexionAgent(llm, examples, ac, mapper, memory, record_plan=record_plan)
    if name == "fcrf":
        return FcrfAgent(llm, examples, ac, mapper, memory)
    if name in ("muse", "muse-lowest", "muse-random"):
        if scorer is None:
            raise ValueError(f"scorer: agent {name!r} needs a TrajectoryScorer")
        select = {"muse": "highest", "muse-lowest": "lowest", "muse-random": "random"}[name]
        return MuseAgent(llm, examples, ac, mapper, memory, scorer, select)
    raise ValueError(f"agent: unknown agent {name!r}")


def _chunk_predictions(scorer: Any, rec: dict[str, Any]) -> list[float]:
    from metacog_fast.scoring import chunk_episode

    if not rec["pairs"]:
        return []
    chunks = chunk_episode([tuple(p) for p in rec["pairs"]], scorer.config.chunk_size)
    return [float(x) for x in scorer.score(rec["task"], rec.get("plan", ""), chunks)]


def run_group(run_dir: str, cfg_dict: dict[str, Any], games: list[dict[str, str]], fewshot: str,
              log: Callable[[str], None] | None = None, record_plan: bool = False) -> int:
    """One worker: play every missing episode of ``games`` in order. Returns episodes played."""
    from metacog_fast.agents.alfworld.memory import ReflectionMemory
    from metacog_fast.envs import make_env
    from metacog_fast.scoring import MiniLMEncoder, TrajectoryScorer

    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    rd = Path(run_dir)
    cfg = RunConfig.from_dict(cfg_dict)
    ac = cfg.agent_config
    plan = episode_plan(cfg)
    examples = load_examples(fewshot, ac.examples, ac.example_max_steps, cfg.data)
    muse = cfg.agent.startswith("muse")
    pre = None
    if muse:
        pre = TrajectoryScorer.load(cfg.scorer)
        encoder = pre.encoder
    else:
        encoder = MiniLMEncoder()
    llm = open_llm_for(cfg)
    mem_name = games[0]["task_type"] if games else "empty"
    memory = ReflectionMemory(rd / "memory" / f"{mem_name}.db", encoder)
    env = make_env("alfworld", split=cfg.split, data=cfg.data, max_episode_steps=max(ac.max_steps, 1))
    played = 0
    try:
        scorer = None
        agent = make_agent(cfg.agent, llm, examples, ac, encoder, memory, None if not muse else pre,
                           record_plan=record_plan)
        for g in games:
            records = load_records(rd, g["game"], plan)
            agent.restore(g["game"], records)
            if muse:
                scorer = TrajectoryScorer.load(cfg.scorer, encoder=encoder)
                agent.scorer = scorer
            for idx, (phase, k) in enumerate(plan):
                if muse and phase == "test" and k == 0 and cfg.adapt_episodes > 0:
                    scorer = _adapted_scorer(rd, g["game"], cfg, encoder, records[: cfg.adapt_episodes])
                    agent.scorer = scorer
                if idx < len(records):
                    continue
                rec = _play(env, agent, llm, g, idx, phase, ac.max_steps)
                if muse:
                    rec["chunk_probs"] = _chunk_predictions(scorer, rec)
                    rec["chunk_probs_pre"] = _chunk_predictions(pre, rec)
                rec["k"] = k
                write_json_atomic(record_path(rd, g["game"], phase, k), rec)
                records.append(rec)
                played += 1
                log(f"[{cfg.agent}] {g['game']} {phase} {k}: won={rec['won']} steps={rec['steps']} "
                    f"llm={rec['llm']['seconds']:.1f}s env={rec['env_seconds']:.1f}s wall={rec['wall_seconds']:.1f}s")
    finally:
        env.close()
        memory.close()
        llm.close()
    return played


def _play(env: Any, agent: Any, llm: Any, g: dict[str, str], idx: int, phase: str, max_steps: int) -> dict[str, Any]:
    from metacog_fast.agents.alfworld.episode import run_episode

    return run_episode(env, agent, llm, g["game"], g["gamefile"], idx, phase, max_steps)


def _adapted_scorer(rd: Path, game: str, cfg: RunConfig, encoder: Any, adapt_records: list[dict[str, Any]]) -> Any:
    """g_eta after the game's adaptation episodes: loaded if saved, else fitted (replay of
    pre-deployment + new chunks, Alg. 4) and saved."""
    from metacog_fast.scoring import TrajectoryScorer

    folder = rd / "scorers" / game
    if (folder / "config.json").exists():
        return TrajectoryScorer.load(folder, encoder=encoder)
    scorer = TrajectoryScorer.load(cfg.scorer, encoder=encoder)
    ex = chunk_examples(adapt_records, scorer.config.chunk_size)
    if ex:
        scorer.fit_incremental(ex, steps=cfg.incremental_steps)
    scorer.save(folder, include_replay=False)
    return scorer


def _group_by_type(games: list[dict[str, str]], workers: int) -> list[list[list[dict[str, str]]]]:
    groups: dict[str, list[dict[str, str]]] = {}
    for g in games:
        groups.setdefault(g["task_type"], []).append(g)
    buckets: list[list[list[dict[str, str]]]] = [[] for _ in range(workers)]
    for i, grp in enumerate(groups.values()):
        buckets[i % workers].append(grp)
    return [b for b in buckets if b]


def _worker(run_dir: str, cfg_dict: dict[str, Any], groups: list[list[dict[str, str]]], fewshot: str,
            record_plan: bool = False) -> int:
    n = 0
    for grp in groups:
        n += run_group(run_dir, cfg_dict, grp, fewshot, record_plan=record_plan)
    return n


def prepare_run(run_dir: str | Path, cfg: RunConfig) -> list[dict[str, str]]:
    """Write (or check) config.json and return the run's games."""
    cfg.validate()
    rd = Path(run_dir)
    d = cfg.to_dict()
    cfg_file = rd / "config.json"
    if cfg_file.exists():
        old = read_json(cfg_file).get("config", {})
        a = {k: v for k, v in old.items() if k != "workers"}
        b = {k: v for k, v in d.items() if k != "workers"}
        if a != b:
            diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            raise ValueError(f"{cfg_file}: the run folder holds a different configuration (fields {diff}); "
                             "use another --out or the same options to resume")
    games = select_games(cfg.split, cfg.tasks, cfg.data)
    write_json_atomic(cfg_file, {"config": d, "games": games})
    return games


def run_protocol(run_dir: str | Path, cfg: RunConfig, fewshot: str | Path = DEFAULT_FEWSHOT) -> dict[str, Any]:
    """Run (or resume) a whole run; returns {"episodes_played", "wall_seconds"}."""
    t0 = time.perf_counter()
    games = prepare_run(run_dir, cfg)
    load_examples(fewshot, cfg.agent_config.examples, cfg.agent_config.example_max_steps, cfg.data)
    buckets = _group_by_type(games, cfg.workers)
    d = cfg.to_dict()
    if len(buckets) == 1:
        played = _worker(str(run_dir), d, buckets[0], str(fewshot))
    else:
        ctx = mp.get_context("spawn")
        with ctx.Pool(len(buckets)) as pool:
            played = sum(pool.starmap(_worker, [(str(run_dir), d, b, str(fewshot)) for b in buckets]))
    return {"episodes_played": played, "wall_seconds": time.perf_counter() - t0}


# -- pre-deployment (Alg. 3) -----------------------------------------------------------------
def pretrain(out_dir: str | Path, games: int = 6, episodes: int = 2, split: str = "valid_seen",
             data: str | None = None, expert_positives: bool = True, agent_config: AgentConfig | None = None,
             llm: str | None = None, n_threads: int = 1, workers: int = 1, epochs: int | None = None,
             fewshot: str | Path = DEFAULT_FEWSHOT, train_only: bool = False,
             n_ctx: int = RunConfig.n_ctx) -> dict[str, Any]:
    """Reflexion episodes on ``split`` (persisted, resumable: ``out_dir/collect``), then M_sa
    trained on 4-pair chunks labelled by outcome (plus expert walkthrough chunks as positives
    when ``expert_positives``), saved to ``out_dir/scorer``. ``train_only``: skip the collection
    and train on the episodes recorded so far (an interrupted collection). Returns training facts."""
    from metacog_fast.scoring import ScorerConfig, TrajectoryScorer

    out = Path(out_dir)
    cfg = RunConfig(agent="reflexion", split=split, data=data, tasks=games, adapt_episodes=0,
                    test_episodes=episodes, llm=llm, n_threads=n_threads, n_ctx=n_ctx, workers=workers,
                    agent_config=agent_config or AgentConfig())
    collect = out / "collect"
    games_list = prepare_run(collect, cfg)
    load_examples(fewshot, cfg.agent_config.examples, cfg.agent_config.example_max_steps, data)
    buckets = _group_by_type(games_list, workers)
    d = cfg.to_dict()
    t0 = time.perf_counter()
    if train_only:
        pass
    elif len(buckets) == 1:
        _worker(str(collect), d, buckets[0], str(fewshot), True)
    else:
        ctx = mp.get_context("spawn")
        with ctx.Pool(len(buckets)) as pool:
            pool.starmap(_worker, [(str(collect), d, b, str(fewshot), True) for b in buckets])
    records = []
    for g in games_list:
        records += load_records(collect, g["game"], episode_plan(cfg))
    if not records and not expert_positives:
        raise ValueError(f"{collect}: no recorded episodes and no expert positives: nothing to train on")
    ex = chunk_examples(records)
    n_expert = 0
    if expert_positives:
        exp = expert_examples(games_list, split, data)
        n_expert = len(exp)
        ex += exp
    scorer = TrajectoryScorer(ScorerConfig())
    losses = scorer.fit(ex, epochs=epochs)
    scorer.save(out / "scorer")
    facts = {"episodes": len(records), "successes": sum(bool(r["won"]) for r in records),
             "chunks_from_episodes": len(ex) - n_expert, "chunks_from_expert": n_expert,
             "positives": int(sum(e["label"] for e in ex)), "final_loss": losses[-1] if losses else None,
             "collect_seconds": time.perf_counter() - t0, "expert_positives": expert_positives,
             "train_only": train_only, "games_planned": games, "episodes_planned": games * episodes}
    write_json_atomic(out / "pretrain.json", facts)
    return facts


def expert_examples(games: Sequence[dict[str, str]], split: str, data: str | None) -> list[dict[str, Any]]:
    """Chunks of each game's expert walkthrough, label 1, plan derived from the walkthrough."""
    from metacog_fast.agents.alfworld.fewshot import format_plan, plan_from_walkthrough
    from metacog_fast.envs import make_env
    from metacog_fast.scoring import chunk_episode

    out = []
    env = make_env("alfworld", split=split, data=data)
    try:
        for g in games:
            obs, info = env.reset(game=g["gamefile"])
            walk = list(env.walkthrough)
            pairs = []
            for a in walk:
                o, _r, done, info = env.step(a)
                pairs.append((a, " ".join(o.split())))
                if done:
                    break
            if not info.get("won"):
                continue
            task = info["task"] if info["task"].startswith("Your task") else f"Your task is to: {info['task']}"
            plan = format_plan(plan_from_walkthrough(walk))
            for c in chunk_episode(pairs, 4):
                out.append({"task": task, "plan": plan, "chunk": c, "label": 1.0})
    finally:
        env.close()
    return out
