"""Protocol runner: adaptation + test episodes per game (Alg. 4), pre-deployment (Alg. 3).

Layout of a run folder::

    config.json                          RunConfig (a resumed run must match it)
    episodes/<game>/<phase>_<k>.json     one record per finished episode (atomic write)
    scorers/<game>/                      MUSE agents: g_eta after the game's adaptation episodes

The run goes through the one harness (``metacog_fast.runs``, docs/runs.md): one task per task
type (a type's games share the lesson pool and the reflection memory, which lives in the task's
scratch folder and is rebuilt from the records). Episodes are persisted as they end; a restarted
run skips finished ones, rebuilds reflections and lesson pools from the records, reloads or
refits the adapted scorer, and goes on. Tasks run in this process, in local worker processes or
on Ray (``ExecutorConfig``).
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from metacog_fast.alfworld.config import AgentConfig, PretrainConfig, RunConfig, resolve_run_defaults
from metacog_fast.alfworld.fewshot import TASK_TYPES, load_examples
from metacog_fast.llm.models import models_identity
from metacog_fast.runs import ExecutorConfig, Record, RunFolder, RunSummary, SideFile, Task, run_tasks
from metacog_fast.runs.records import read_json, write_json_atomic

REPO = Path(__file__).resolve().parents[3]
DEFAULT_FEWSHOT = REPO / "results" / "alfworld" / "fewshot.json"


def game_key(gamefile: str | Path) -> str:
    p = Path(gamefile)
    return f"{p.parent.parent.name}__{p.parent.name}"


def select_games(split: str, n: int, data: str | None = None) -> list[dict[str, str]]:
    """``n`` games taken round-robin over the 6 task types (sorted game order inside a type)."""
    from metacog_fast.alfworld.env import list_games, task_type_of

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


def record_key(game: str, phase: str, k: int) -> str:
    """The harness key of a game's episode record."""
    return f"episodes/{game}/{phase}_{k}"


def record_path(run_dir: str | Path, game: str, phase: str, k: int) -> Path:
    return Path(run_dir) / f"{record_key(game, phase, k)}.json"


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
def open_llm_for(cfg: RunConfig, uri: str | None = None) -> Any:
    """The LLM at ``uri`` (default ``cfg.llm``), with the run's threads, context and seed where it is
    embedded."""
    from metacog_fast.llm import open_llm
    from metacog_fast.llm.uri import is_embedded

    uri = cfg.llm if uri is None else uri
    if is_embedded(uri):
        return open_llm(uri, n_threads=cfg.n_threads, n_ctx=cfg.n_ctx, seed=cfg.agent_config.seed)
    return open_llm(uri)


def make_agent(name: str, llm: Any, examples: dict[str, Any], ac: AgentConfig, encoder: Any,
               memory: Any, scorer: Any = None, record_plan: bool = False, reflector: Any = None) -> Any:
    """The agent ``name`` acting with ``llm``; ``reflector`` (None: ``llm``) writes its reflections."""
    from metacog_fast.alfworld.actions import ActionMapper
    from metacog_fast.alfworld.agents import FcrfAgent, MuseAgent, ReActAgent, ReflexionAgent

    mapper = ActionMapper(ac.map_actions, encoder=encoder, llm=llm)
    if name == "react":
        return ReActAgent(llm, examples, ac, mapper)
    if name == "reflexion":
        return ReflexionAgent(llm, examples, ac, mapper, memory, record_plan=record_plan, reflector=reflector)
    if name == "fcrf":
        return FcrfAgent(llm, examples, ac, mapper, memory, reflector=reflector)
    if name in ("muse", "muse-lowest", "muse-random"):
        if scorer is None:
            raise ValueError(f"scorer: agent {name!r} needs a TrajectoryScorer")
        select = {"muse": "highest", "muse-lowest": "lowest", "muse-random": "random"}[name]
        return MuseAgent(llm, examples, ac, mapper, memory, scorer, select, reflector=reflector)
    raise ValueError(f"agent: unknown agent {name!r}")


def _chunk_predictions(scorer: Any, rec: dict[str, Any]) -> list[float]:
    from metacog_fast.scoring import chunk_episode

    if not rec["pairs"]:
        return []
    chunks = chunk_episode([tuple(p) for p in rec["pairs"]], scorer.config.chunk_size)
    return [float(x) for x in scorer.score(rec["task"], rec.get("plan", ""), chunks)]


def _group_records(done: Mapping[str, Any], game: str, plan: Sequence[tuple[str, int]]) -> list[dict[str, Any]]:
    """``game``'s finished records from ``done`` in plan order, up to the first missing one."""
    out = []
    for phase, k in plan:
        r = done.get(record_key(game, phase, k))
        if r is None:
            break
        out.append(r)
    return out


def play_group(payload: dict[str, Any], done: Mapping[str, Any], workdir: Path,
               log: Callable[[str], None] | None = None) -> Iterator[Record | SideFile]:
    """Task function (``metacog_fast.runs``): play every missing episode of one task type's games
    in order; they share the lesson pool and the reflection memory, rebuilt from ``done``. Yields
    each episode's record, and a MUSE game's adapted scorer once fitted."""
    from metacog_fast.alfworld.memory import ReflectionMemory
    from metacog_fast.envs import make_env
    from metacog_fast.scoring import MiniLMEncoder, TrajectoryScorer

    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    cfg = RunConfig.from_dict(payload["config"])
    games: list[dict[str, str]] = payload["games"]
    ac = cfg.agent_config
    plan = episode_plan(cfg)
    examples = payload["examples"]
    muse = cfg.agent.startswith("muse")
    pre = None
    pre_dir = workdir / "pre_scorer"
    if muse:
        for rel, data in payload["scorer_files"].items():
            (pre_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (pre_dir / rel).write_bytes(data)
        pre = TrajectoryScorer.load(pre_dir)
        encoder = pre.encoder
    else:
        encoder = MiniLMEncoder()
    llm = open_llm_for(cfg)
    reflector = open_llm_for(cfg, cfg.reflector) if cfg.reflector and cfg.reflector != cfg.llm else None
    memory = ReflectionMemory(workdir / "memory" / f"{games[0]['task_type']}.db", encoder)
    env = make_env("alfworld", split=cfg.split, data=cfg.data, max_episode_steps=max(ac.max_steps, 1))
    try:
        scorer = None
        agent = make_agent(cfg.agent, llm, examples, ac, encoder, memory, None if not muse else pre,
                           record_plan=payload.get("record_plan", False), reflector=reflector)
        for g in games:
            records = _group_records(done, g["game"], plan)
            agent.restore(g["game"], records)
            if muse:
                scorer = TrajectoryScorer.load(pre_dir, encoder=encoder)
                agent.scorer = scorer
            for idx, (phase, k) in enumerate(plan):
                if muse and phase == "test" and k == 0 and cfg.adapt_episodes > 0:
                    scorer, fitted = _adapted_scorer(workdir, g["game"], pre_dir, cfg, encoder,
                                                     records[: cfg.adapt_episodes])
                    agent.scorer = scorer
                    if fitted:
                        yield from SideFile.collect(workdir, f"scorers/{g['game']}")
                if idx < len(records):
                    continue
                rec = _play(env, agent, llm, g, idx, phase, ac.max_steps, reflector)
                if muse:
                    rec["chunk_probs"] = _chunk_predictions(scorer, rec)
                    rec["chunk_probs_pre"] = _chunk_predictions(pre, rec)
                rec["k"] = k
                records.append(rec)
                yield Record(record_key(g["game"], phase, k), rec)
                log(f"[{cfg.agent}] {g['game']} {phase} {k}: won={rec['won']} steps={rec['steps']} "
                    f"llm={rec['llm']['seconds']:.1f}s env={rec['env_seconds']:.1f}s wall={rec['wall_seconds']:.1f}s")
    finally:
        env.close()
        memory.close()
        llm.close()
        if reflector is not None:
            reflector.close()


def _play(env: Any, agent: Any, llm: Any, g: dict[str, str], idx: int, phase: str, max_steps: int,
          reflector: Any = None) -> dict[str, Any]:
    from metacog_fast.alfworld.episode import run_episode

    return run_episode(env, agent, llm, g["game"], g["gamefile"], idx, phase, max_steps, reflector=reflector)


def _adapted_scorer(workdir: Path, game: str, pre_dir: Path, cfg: RunConfig, encoder: Any,
                    adapt_records: list[dict[str, Any]]) -> tuple[Any, bool]:
    """g_eta after the game's adaptation episodes: loaded if the run folder kept it (it is among
    the task's inputs), else fitted (replay of pre-deployment + new chunks, Alg. 4). Returns
    (scorer, whether it was fitted now)."""
    from metacog_fast.scoring import TrajectoryScorer

    folder = workdir / "scorers" / game
    if (folder / "config.json").exists():
        return TrajectoryScorer.load(folder, encoder=encoder), False
    scorer = TrajectoryScorer.load(pre_dir, encoder=encoder)
    ex = chunk_examples(adapt_records, scorer.config.chunk_size)
    if ex:
        scorer.fit_incremental(ex, steps=cfg.incremental_steps)
    scorer.save(folder, include_replay=False)
    return scorer, True


def _group_tasks(games: list[dict[str, str]], cfg: RunConfig, examples: dict[str, Any], fewshot_scorer: dict[str, bytes],
                 record_plan: bool) -> list[Task]:
    """One task per task type: a type's games share the lesson pool and reflection memory."""
    groups: dict[str, list[dict[str, str]]] = {}
    for g in games:
        groups.setdefault(g["task_type"], []).append(g)
    plan = episode_plan(cfg)
    d = cfg.to_dict()
    tasks = []
    for t, grp in groups.items():
        payload = {"config": d, "games": grp, "examples": examples, "scorer_files": fewshot_scorer,
                   "record_plan": record_plan}
        keys = tuple(record_key(g["game"], ph, k) for g in grp for ph, k in plan)
        tasks.append(Task(t, payload, keys, inputs=tuple(f"scorers/{g['game']}" for g in grp)))
    return tasks


def _scorer_files(cfg: RunConfig) -> dict[str, bytes]:
    """The pre-deployment scorer folder's files (sent with each task: workers need no shared disk)."""
    if not cfg.agent.startswith("muse"):
        return {}
    root = Path(cfg.scorer)
    if not (root / "config.json").exists():
        raise ValueError(f"scorer: {root} is not a scorer folder (no config.json)")
    return {f.relative_to(root).as_posix(): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def _warn_examples(cfg: RunConfig) -> None:
    """A fine-tuned actor continues the prompt it was trained on: warn when the run puts another
    number of few-shot examples in it (the default 2 with an actor trained on none is the usual slip)."""
    import warnings

    from metacog_fast.llm.models import trained_examples

    k = trained_examples(cfg.llm)
    if k is not None and k != cfg.agent_config.examples:
        warnings.warn(f"examples: {cfg.llm} was trained with {k} few-shot examples per prompt, this run puts "
                      f"{cfg.agent_config.examples} in it; pass --examples {k} to prompt it as trained",
                      UserWarning, stacklevel=3)


def resolved_config(run_dir: str | Path, cfg: RunConfig) -> RunConfig:
    """``cfg`` with the agent settings left at None ("the run's default", config.NEW_RUN_DEFAULTS)
    set: a new folder gets the new-run defaults, a resumed one what its snapshot holds (so a folder
    from before an option resumes with the behaviour it was played with)."""
    snap = Path(run_dir) / "config.json"
    old = None
    if snap.exists():
        doc = read_json(snap)
        old = doc.get("config", doc) if isinstance(doc, dict) else None
        old = (old or {}).get("agent_config") or {} if isinstance(old, dict) else {}
    return dataclasses.replace(cfg, agent_config=resolve_run_defaults(cfg.agent, cfg.agent_config, old))


def prepare_run(run_dir: str | Path, cfg: RunConfig) -> tuple[RunFolder, list[dict[str, str]]]:
    """Open the run folder (config.json written, or checked against ``cfg`` when resuming: only
    ``workers`` may differ, and the models behind the URIs must be the ones the run was started
    with) and return it with the run's games. ``cfg``'s run-default fields are resolved first
    (:func:`resolved_config`)."""
    cfg = resolved_config(run_dir, cfg)
    cfg.validate()
    _warn_examples(cfg)
    games = select_games(cfg.split, cfg.tasks, cfg.data)
    models = models_identity(llm=cfg.llm, **({"reflector": cfg.reflector} if cfg.reflector else {}))
    folder = RunFolder(run_dir, cfg.to_dict(), ignore=("workers",), extra={"games": games}, identity=models)
    return folder, games


def _run_collect(run_dir: str | Path, cfg: RunConfig, fewshot: str | Path, executor: ExecutorConfig | None,
                 record_plan: bool, play: bool = True) -> tuple[RunFolder, list[dict[str, str]], RunSummary | None]:
    cfg = resolved_config(run_dir, cfg)
    folder, games = prepare_run(run_dir, cfg)
    ac = cfg.agent_config
    examples = load_examples(fewshot, ac.examples, ac.example_max_steps, cfg.data)
    if not play:
        return folder, games, None
    tasks = _group_tasks(games, cfg, examples, _scorer_files(cfg), record_plan)
    summary = run_tasks(folder, tasks, play_group, executor, family_workers=cfg.workers, desc=f"alfworld/{cfg.agent}")
    return folder, games, summary


def run_protocol(run_dir: str | Path, cfg: RunConfig, fewshot: str | Path = DEFAULT_FEWSHOT,
                 executor: ExecutorConfig | None = None) -> dict[str, Any]:
    """Run (or resume) a whole run; returns {"episodes_played", "wall_seconds", "harness"}.
    ``executor``: where the task-type groups run (default: in this process for ``cfg.workers``
    = 1, else that many local processes)."""
    t0 = time.perf_counter()
    _folder, _games, summary = _run_collect(run_dir, cfg, fewshot, executor, record_plan=False)
    assert summary is not None
    return {"episodes_played": summary.played, "wall_seconds": time.perf_counter() - t0, "harness": summary.as_dict()}


# -- pre-deployment (Alg. 3) -----------------------------------------------------------------
def pretrain(out_dir: str | Path, pre: PretrainConfig | None = None, run: RunConfig | None = None,
             fewshot: str | Path = DEFAULT_FEWSHOT, executor: ExecutorConfig | None = None) -> dict[str, Any]:
    """Reflexion episodes on ``pre.split`` (persisted, resumable: ``out_dir/collect``), then M_sa
    trained on 4-pair chunks labelled by outcome (plus expert walkthrough chunks as positives
    when ``pre.expert_positives``), saved to ``out_dir/scorer``. ``pre.train_only``: skip the
    collection and train on the episodes recorded so far (an interrupted collection). ``run``: the
    LLM, threads, context, workers, data folder and agent settings (its agent, split, games and
    episodes are set from ``pre``). Returns training facts."""
    from metacog_fast.scoring import ScorerConfig, TrajectoryScorer

    pc = (pre or PretrainConfig()).validate()
    split, episodes, epochs, expert_positives = pc.split, pc.episodes, pc.epochs, pc.expert_positives
    base = run or RunConfig()
    data = base.data
    out = Path(out_dir)
    cfg = dataclasses.replace(base, agent="reflexion", split=split, tasks=pc.tasks, adapt_episodes=0,
                              test_episodes=episodes)
    train_only, games = pc.train_only, pc.tasks
    collect = out / "collect"
    t0 = time.perf_counter()
    _folder, games_list, _summary = _run_collect(collect, cfg, fewshot, executor, record_plan=True,
                                                 play=not train_only)
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
    from metacog_fast.alfworld.fewshot import format_plan, plan_from_walkthrough
    from metacog_fast.envs import make_env, play, sequence_policy
    from metacog_fast.scoring import chunk_episode

    out = []
    env = make_env("alfworld", split=split, data=data)
    try:
        for g in games:
            obs, info = env.reset(game=g["gamefile"])
            walk = list(env.walkthrough)
            ep = play(env, sequence_policy(walk), None, start=(obs, info))
            pairs = [(a, " ".join(o.split())) for a, o in zip(ep.actions, ep.observations[1:])]
            info = ep.info
            if not info.get("won"):
                continue
            task = info["task"] if info["task"].startswith("Your task") else f"Your task is to: {info['task']}"
            plan = format_plan(plan_from_walkthrough(walk))
            for c in chunk_episode(pairs, 4):
                out.append({"task": task, "plan": plan, "chunk": c, "label": 1.0})
    finally:
        env.close()
    return out
