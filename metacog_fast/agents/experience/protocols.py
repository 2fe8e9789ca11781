"""Protocols: continuous learning (memory carried over iterations, scored at each), transfer (frozen
memory, disjoint tasks) and cross-model (memory written by one LLM used by another), with episodes
persisted and runs resumable.

Run folder layout:
  episodes.jsonl   one line per finished task: {"condition", "iteration", "game", ...TaskRecord}
  state.json       {"done": [keys], "memory": <exported memory>} rewritten atomically after each task
  memory.db(.hnsw) the same memories in the memory store
  memory.json      readable export of the final memory
  metrics.json, learning_curve.png
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from metacog_fast.agents.experience.agent import PlanExecuteAgent
from metacog_fast.agents.experience.config import ExperienceConfig
from metacog_fast.agents.experience.embed import make_embedder
from metacog_fast.agents.experience.memory import ExperienceMemory, atomic_write_text, open_store
from metacog_fast.agents.experience.metrics import summarise, write_metrics

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


class Run:
    """A resumable protocol run in one folder."""

    def __init__(self, cfg: ProtocolConfig, exp: ExperienceConfig | None = None, llm: LLM | None = None,
                 log: Callable[[str], None] = print) -> None:
        self.cfg, self.exp, self.log = cfg, exp or ExperienceConfig(), log
        os.makedirs(cfg.out, exist_ok=True)
        self.embed = make_embedder(cfg.embedder)
        self.state_path = os.path.join(cfg.out, "state.json")
        self.episodes_path = os.path.join(cfg.out, "episodes.jsonl")
        self.memory = ExperienceMemory(self.exp, self.embed)
        self.done: list[str] = []
        if os.path.exists(self.state_path):
            with open(self.state_path, encoding="utf-8") as f:
                state = json.load(f)
            self.done = list(state["done"])
            self.memory.load_json(state["memory"], merge=False)
            log(f"resuming: {len(self.done)} tasks already done")
        elif cfg.memory_in:
            self.memory.load_json(cfg.memory_in, merge=False)
        if llm is None:
            from metacog_fast.llm import open_llm

            llm = open_llm(cfg.llm_uri, n_threads=cfg.n_threads) if (cfg.llm_uri or "llama-cpp").startswith(
                "llama-cpp") else open_llm(cfg.llm_uri)
        self.llm = llm
        self.model = cfg.llm_uri or os.environ.get("METACOG_LLM", "llama-cpp://")
        atomic_write_text(os.path.join(cfg.out, "config.json"),
                          json.dumps({"protocol": asdict(cfg), "experience": asdict(self.exp)}, indent=2) + "\n")

    def episodes(self) -> list[dict[str, Any]]:
        """Finished episodes (only those recorded in state.json; a line written before a crash is ignored)."""
        if not os.path.exists(self.episodes_path):
            return []
        done = set(self.done)
        out: dict[str, dict] = {}
        with open(self.episodes_path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    d = json.loads(line)
                    if d["key"] in done:
                        out[d["key"]] = d
        return list(out.values())

    def run_one(self, condition: str, iteration: int, game: str, use_memory: bool, learn: bool) -> None:
        key = f"{condition}/{iteration}/{game}"
        if key in self.done:
            return
        exp = ExperienceConfig(**{**asdict(self.exp), "use_memory": use_memory, "learn": learn})
        agent = PlanExecuteAgent(self.llm, self.cfg.env, self.memory if use_memory else None, exp,
                                 run_id=os.path.basename(os.path.abspath(self.cfg.out)), model=self.model,
                                 embed=self.embed)
        env, opts = open_env(self.cfg, game, exp.episode_action_cap + exp.verify_step_allowance)
        try:
            rec = agent.run_task(env, **opts)
        finally:
            env.close()
        line = {"key": key, "condition": condition, "iteration": iteration, "game_arg": game, **rec.as_dict()}
        with open(self.episodes_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.done.append(key)
        atomic_write_text(self.state_path, json.dumps({"done": self.done, "memory": self.memory.to_json()}) + "\n")
        self.log(f"{key}: won={rec.won} actions={rec.env_actions} subtasks={rec.subtasks_flagged}/"
                 f"{rec.subtasks_total} retries={rec.retries} tokens={rec.tokens} {rec.seconds:.0f}s "
                 f"memory={rec.memory_sizes}")

    def finish(self) -> dict[str, Any]:
        self.memory.export_json(os.path.join(self.cfg.out, "memory.json"))
        store = open_store(os.path.join(self.cfg.out, "memory.db"))
        try:
            self.memory.save(store)
        finally:
            store.close()
        metrics = summarise(self.episodes())
        write_metrics(metrics, self.cfg.out)
        return metrics


def continuous_learning(cfg: ProtocolConfig, exp: ExperienceConfig | None = None, llm: LLM | None = None,
                        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Baseline once (no memory), then ``iterations`` passes over the games with memory carried forward."""
    run = Run(cfg, exp, llm, log)
    if cfg.baseline:
        for g in cfg.games:
            run.run_one("baseline", 0, g, use_memory=False, learn=False)
    for it in range(1, cfg.iterations + 1):
        for g in cfg.games:
            run.run_one("memory", it, g, use_memory=True, learn=True)
    return run.finish()


def transfer(cfg: ProtocolConfig, exp: ExperienceConfig | None = None, llm: LLM | None = None,
             log: Callable[[str], None] = print) -> dict[str, Any]:
    """Frozen memory (``cfg.memory_in``) used zero-shot on ``cfg.games`` (disjoint from where it was learnt),
    against the no-memory baseline on the same games. Also the cross-model protocol when ``cfg.llm_uri``
    names another backend than the one that wrote the memory (see each entry's provenance.model)."""
    if not cfg.memory_in:
        raise ValueError("transfer needs memory_in: an exported memory JSON")
    run = Run(cfg, exp, llm, log)
    for g in cfg.games:
        if cfg.baseline:
            run.run_one("baseline", 0, g, use_memory=False, learn=False)
        run.run_one("frozen", 1, g, use_memory=True, learn=False)
    return run.finish()
