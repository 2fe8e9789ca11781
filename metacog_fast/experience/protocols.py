"""Protocols: continuous learning (memory carried over iterations, scored at each), transfer (frozen
memory, disjoint tasks) and cross-model (memory written by one LLM used by another), with episodes
persisted and runs resumable.

Run folder layout (the one harness, ``metacog_fast.runs``; docs/runs.md):
  config.json                                  protocol + experience configuration (a resumed run must match)
  episodes/<condition>/<iteration>/<game>.json one record per finished task: {"key", "condition",
                                               "iteration", "game_arg", ...TaskRecord, "memory_after"}
  memory.db(.hnsw) the final memories in the memory store
  memory.json      readable export of the final memory
  metrics.json, learning_curve.png

Baseline episodes are independent tasks; the memory (or frozen) condition is one ordered task,
its memory after each episode kept in that episode's record, so a resumed run continues from
the last record written.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from metacog_fast.experience.agent import PlanExecuteAgent
from metacog_fast.experience.config import ExperienceConfig
from metacog_fast.experience.embed import make_embedder
from metacog_fast.experience.memory import ExperienceMemory, open_store
from metacog_fast.experience.metrics import summarise, write_metrics
from metacog_fast.llm.models import models_identity
from metacog_fast.runs import ExecutorConfig, Record, RunFolder, Task, run_tasks

if TYPE_CHECKING:
    from metacog_fast.llm.protocol import LLM


@dataclass
class ProtocolConfig:
    """What a protocol run covers."""

    env: str = "alfworld"
    """"alfworld" or "scienceworld"."""
    split: str = "valid_seen"
    """Environment split (ALFWorld: valid_seen / valid_train / train; ScienceWorld: train / dev / test)."""
    games: list[str] = field(default_factory=lambda: ["0", "1"])
    """ALFWorld: game indices into the sorted split; ScienceWorld: "task:variation" items."""
    iterations: int = 3
    """Continuous-learning passes over ``games`` with memory carried forward."""
    baseline: bool = True
    """Also run the no-memory baseline (once: greedy decoding makes it identical across passes)."""
    llm_uri: str | None = None
    """LLM URI (None: METACOG_LLM or the embedded SmolLM2)."""
    n_threads: int = 1
    """llama.cpp threads (1 on this shared machine, see docs/llm.md)."""
    embedder: str = "hashing"
    """"hashing" or "minilm" (dedup and SOP lookup)."""
    memory_in: str | None = None
    """Start from this exported memory JSON (transfer / cross-model)."""
    out: str = "results/experience/run"
    """Run folder."""

    def validate(self) -> "ProtocolConfig":
        """Raises ValueError naming the first bad field (before any model, env or run folder opens)."""
        if self.env not in ("alfworld", "scienceworld"):
            raise ValueError(f"env: expected 'alfworld' or 'scienceworld', got {self.env!r}")
        for name in ("iterations", "n_threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
        if not self.games:
            raise ValueError("games: expected at least one game")
        for g in self.games:
            if self.env == "alfworld" and not str(g).isdigit():
                raise ValueError(f"games: ALFWorld games are integer indices, got {g!r}")
            if self.env == "scienceworld" and not str(g).partition(":")[2].isdigit():
                raise ValueError(f"games: ScienceWorld games are 'task:variation', got {g!r}")
        if self.embedder not in ("hashing", "minilm"):
            raise ValueError(f"embedder: expected 'hashing' or 'minilm', got {self.embedder!r}")
        return self


def open_env(cfg: ProtocolConfig, game: str, env_steps: int = 100) -> tuple[Any, dict[str, Any]]:
    """An env adapter for one game and the reset options that select it; ``env_steps``: the
    environment's own step limit (the agent's cap plus the verifier's allowance)."""
    from metacog_fast.envs import make_env

    if cfg.env == "alfworld":
        try:
            idx = int(game)
        except ValueError:
            raise ValueError(f"ALFWorld games must be integer indices, got {game!r}") from None
        return make_env("alfworld", split=cfg.split, game=idx, max_episode_steps=env_steps), {}
    if cfg.env == "scienceworld":
        task, _, var = game.partition(":")
        if not var.isdigit():
            raise ValueError(f"ScienceWorld games must be 'task:variation', got {game!r}")
        return make_env("scienceworld", task=task, variation=int(var), split=cfg.split, step_limit=10 * env_steps), {}
    raise ValueError(f"env must be 'alfworld' or 'scienceworld', got {cfg.env!r}")


Episode = tuple[str, int, str]
"""(condition, iteration, game) of one task of a protocol."""


def record_key(condition: str, iteration: int, game: str) -> str:
    """The harness key of an episode's record (``episodes/<condition>/<iteration>/<game>``)."""
    if not game or "/" in game or game.startswith("."):
        raise ValueError(f"games: expected an index or 'task:variation', got {game!r}")
    return f"episodes/{condition}/{iteration}/{game}"


def _open_llm(cfg: ProtocolConfig) -> LLM:
    from metacog_fast.llm import open_llm
    from metacog_fast.llm.uri import is_embedded

    if is_embedded(cfg.llm_uri):
        return open_llm(cfg.llm_uri, n_threads=cfg.n_threads)
    return open_llm(cfg.llm_uri)


def play_episodes(payload: dict[str, Any], done: Mapping[str, Any], workdir: Path,
                  log: Callable[[str], None] | None = None) -> Iterator[Record]:
    """Task function (``metacog_fast.runs``): play ``payload["episodes"]`` in order with one memory
    (None for the baseline). A learning or frozen group's memory is the last finished record's
    ``memory_after`` (else ``memory_in``), so a resumed group continues exactly where it stopped."""
    cfg = ProtocolConfig(**payload["protocol"])
    base = ExperienceConfig(**payload["experience"])
    use_memory, learn = payload["use_memory"], payload["learn"]
    log = log or payload.get("log") or (lambda s: print(s, flush=True))
    embed = make_embedder(cfg.embedder)
    memory = ExperienceMemory(base, embed) if use_memory else None
    episodes = [tuple(e) for e in payload["episodes"]]
    if memory is not None:
        last = [done[k]["memory_after"] for k in (record_key(*e) for e in episodes) if k in done]
        start = last[-1] if last else payload.get("memory_in")
        if start is not None:
            memory.load_json(start, merge=False)
    llm = payload.get("llm") or _open_llm(cfg)
    try:
        for condition, iteration, game in episodes:
            key = record_key(condition, iteration, game)
            if key in done:
                continue
            exp = ExperienceConfig(**{**asdict(base), "use_memory": use_memory, "learn": learn})
            agent = PlanExecuteAgent(llm, cfg.env, memory, exp, run_id=payload["run_id"], model=payload["model"],
                                     embed=embed)
            env, opts = open_env(cfg, game, exp.episode_action_cap + exp.verify_step_allowance)
            try:
                rec = agent.run_task(env, **opts)
            finally:
                env.close()
            line = {"key": f"{condition}/{iteration}/{game}", "condition": condition, "iteration": iteration,
                    "game_arg": game, **rec.as_dict()}
            if memory is not None:
                line["memory_after"] = memory.to_json()
            yield Record(key, line)
            log(f"{line['key']}: won={rec.won} actions={rec.env_actions} subtasks={rec.subtasks_flagged}/"
                f"{rec.subtasks_total} retries={rec.retries} tokens={rec.tokens} {rec.seconds:.0f}s "
                f"memory={rec.memory_sizes}")
    finally:
        if payload.get("llm") is None:
            llm.close()


def _run(cfg: ProtocolConfig, exp: ExperienceConfig | None, llm: LLM | None, log: Callable[[str], None],
         executor: ExecutorConfig | None, baseline: list[Episode], group: list[Episode], group_condition: str,
         learn: bool) -> dict[str, Any]:
    """Baseline episodes as independent tasks, the memory episodes as one ordered task (they share
    the memory); then memory.json, memory.db and the metrics from the records."""
    exp = exp or ExperienceConfig()
    if llm is not None and (executor or ExecutorConfig()).executor not in ("local", "inline"):
        raise ValueError("llm: an LLM object runs in this process only; give ProtocolConfig.llm_uri to run "
                         f"on executor {executor.executor!r}")
    folder = RunFolder(cfg.out, {"protocol": asdict(cfg), "experience": asdict(exp)},
                       ignore=("protocol.n_threads", "protocol.out", "protocol.iterations"),
                       identity=models_identity(llm=cfg.llm_uri) if cfg.llm_uri and llm is None else None)
    memory_in = None
    if cfg.memory_in:
        probe = ExperienceMemory(exp, make_embedder(cfg.embedder))
        probe.load_json(cfg.memory_in, merge=False)  # checked here, sent as JSON: no shared disk needed
        memory_in = probe.to_json()
    ex = executor or ExecutorConfig()
    in_process = llm is not None or ex.executor == "inline" or (ex.executor == "local" and ex.resolved_workers(1) == 1)
    own_llm = None
    if in_process and llm is None and not all(folder.has(record_key(*e)) for e in baseline + group):
        own_llm = llm = _open_llm(cfg)  # in this process every episode shares one LLM
    common = {"protocol": asdict(cfg), "experience": asdict(exp), "llm": llm,
              "log": log if in_process else None,  # a worker elsewhere logs to its own stdout
              "run_id": os.path.basename(os.path.abspath(cfg.out)),
              "model": cfg.llm_uri or os.environ.get("METACOG_LLM", "llama-cpp://")}
    if llm is not None:
        executor = ExecutorConfig(**{**asdict(executor or ExecutorConfig()), "executor": "inline"})
    tasks = [Task(record_key(*e), {**common, "episodes": [e], "use_memory": False, "learn": False},
                  (record_key(*e),)) for e in baseline]
    if group:
        tasks.append(Task(group_condition, {**common, "episodes": group, "use_memory": True, "learn": learn,
                                            "memory_in": memory_in}, tuple(record_key(*e) for e in group)))
    try:
        run_tasks(folder, tasks, play_episodes, executor, family_workers=1, desc=f"experience/{group_condition}")
    finally:
        if own_llm is not None:
            own_llm.close()
    order = baseline + group
    episodes = [folder.read(record_key(*e)) for e in order]
    memory = ExperienceMemory(exp, make_embedder(cfg.embedder))
    last = [r["memory_after"] for r in episodes if "memory_after" in r]
    if last or memory_in is not None:
        memory.load_json(last[-1] if last else memory_in, merge=False)
    memory.export_json(os.path.join(cfg.out, "memory.json"))
    store = open_store(os.path.join(cfg.out, "memory.db"))
    try:
        memory.save(store)
    finally:
        store.close()
    metrics = summarise([{k: v for k, v in r.items() if k != "memory_after"} for r in episodes])
    write_metrics(metrics, cfg.out)
    return metrics


def continuous_learning(cfg: ProtocolConfig, exp: ExperienceConfig | None = None, llm: LLM | None = None,
                        log: Callable[[str], None] = print, executor: ExecutorConfig | None = None) -> dict[str, Any]:
    """Baseline once (no memory), then ``iterations`` passes over the games with memory carried forward.
    ``llm``: an LLM object (runs in this process); else ``cfg.llm_uri`` is opened by each task.
    ``executor``: where the tasks run (the baseline episodes are independent tasks)."""
    cfg.validate()
    baseline = [("baseline", 0, g) for g in cfg.games] if cfg.baseline else []
    group = [("memory", it, g) for it in range(1, cfg.iterations + 1) for g in cfg.games]
    return _run(cfg, exp, llm, log, executor, baseline, group, "memory", learn=True)


def transfer(cfg: ProtocolConfig, exp: ExperienceConfig | None = None, llm: LLM | None = None,
             log: Callable[[str], None] = print, executor: ExecutorConfig | None = None) -> dict[str, Any]:
    """Frozen memory (``cfg.memory_in``) used zero-shot on ``cfg.games`` (disjoint from where it was learnt),
    against the no-memory baseline on the same games. Also the cross-model protocol when ``cfg.llm_uri``
    names another backend than the one that wrote the memory (see each entry's provenance.model)."""
    cfg.validate()
    if not cfg.memory_in:
        raise ValueError("memory_in: transfer needs an exported memory JSON")
    baseline = [("baseline", 0, g) for g in cfg.games] if cfg.baseline else []
    group = [("frozen", 1, g) for g in cfg.games]
    return _run(cfg, exp, llm, log, executor, baseline, group, "frozen", learn=False)
