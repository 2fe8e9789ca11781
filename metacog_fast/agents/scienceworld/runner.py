"""The protocol: gold paths of train variations -> ranker; per task: AMM warm-up on train
variations, then every configuration on test variations. One episode = one JSON file; a run
folder resumes where it stopped. Tasks are spread over worker processes (one JVM and one LLM each).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from metacog_fast.agents.scienceworld.config import CONFIG_NAMES, config_for
from metacog_fast.agents.scienceworld.store import episode_path, read_json, write_json
from metacog_fast.agents.scienceworld.swift import GoldExample, LLMSwift, RankerModel, RankerSwift, train_ranker

if TYPE_CHECKING:
    from metacog_fast.envs.base import Env
    from metacog_fast.llm.protocol import LLM


SIMULATOR_STEP_LIMIT = 100_000
"""The simulator's own limit, far above any agent budget: it counts ticks, and one ``wait`` is
about ten of them, so a limit near the budget ended episodes early, and differently per agent."""


@dataclass
class RunConfig:
    """One run of the ScienceWorld protocol."""

    configs: list[str] = field(default_factory=lambda: list(CONFIG_NAMES))
    """Configurations to evaluate."""
    tasks: list[int] = field(default_factory=lambda: list(range(30)))
    """Task indices 0-29."""
    variations: int = 2
    """Test variations per task (the first N of the test split)."""
    max_steps: int = 50
    """Agent actions per episode: the floor of the budget (see ``budget_factor``)."""
    budget_factor: float = 1.5
    """Budget = max(max_steps, ceil(budget_factor x gold path length)) per variation; 0: flat max_steps."""
    train_variations: int = 1
    """Train variations per task whose gold paths train the ranker."""
    warmup_per_task: int = 2
    """AMM warm-up episodes per task (train variations; excluded from the metrics). 2 x 30 tasks = the paper's 60."""
    swift: str = "ranker"
    """Swift proposer: ranker or llm."""
    workers: int = 1
    """Worker processes (tasks are spread over them)."""
    llm: str | None = None
    """LLM URI (None: $METACOG_LLM, then the embedded SmolLM2-135M)."""
    n_threads: int = 1
    """llama.cpp threads per worker."""
    memory_embed: str = "hash"
    """AMM embeddings: hash (hashed words, 384-d) or minilm."""

    def validate(self) -> "RunConfig":
        bad = [c for c in self.configs if c not in CONFIG_NAMES]
        if bad:
            raise ValueError(f"configs: unknown {bad}; expected some of {CONFIG_NAMES}")
        if not self.tasks or any(not 0 <= t < 30 for t in self.tasks):
            raise ValueError(f"tasks: expected indices in 0..29, got {self.tasks}")
        for n in ("variations", "max_steps", "train_variations", "workers", "n_threads"):
            if getattr(self, n) < 1:
                raise ValueError(f"{n}: expected >= 1, got {getattr(self, n)}")
        if not self.budget_factor >= 0:
            raise ValueError(f"budget_factor: expected >= 0, got {self.budget_factor}")
        if self.warmup_per_task < 0:
            raise ValueError(f"warmup_per_task: expected >= 0, got {self.warmup_per_task}")
        return self


def parse_tasks(spec: str) -> list[int]:
    """"0-29" / "0,3,5-7" -> sorted task indices."""
    out: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                a, b = part.split("-", 1)
                out.update(range(int(a), int(b) + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ValueError(f"tasks: expected indices like '0-29' or '0,3,5-7', got {spec!r}") from None
    if not out or min(out) < 0 or max(out) > 29:
        raise ValueError(f"tasks: expected indices in 0..29, got {spec!r}")
    return sorted(out)


# ------------------------------------------------------------------ gold paths
def walk_gold(env: Env, variation: int) -> list[GoldExample]:
    """Reset ``env`` to ``variation`` and follow its gold path, recording each state whose gold
    action is admissible."""
    obs, info = env.reset(variation=variation)
    out: list[GoldExample] = []
    executed: dict[str, int] = {}
    last = ""
    for a in env.gold_path:
        valid = list(info["admissible"])
        if a in valid:
            out.append(GoldExample(info["task"], obs, last, valid, dict(executed), a))
        obs, _r, done, info = env.step(a)
        executed[a] = executed.get(a, 0) + 1
        last = a
        if done:
            break
    return out


def collect_gold(task: int, n_variations: int, step_limit: int = 200) -> list[GoldExample]:
    """Walk the gold paths of the first ``n_variations`` train variations, recording each state."""
    from metacog_fast.envs import make_env

    env = make_env("scienceworld", task=task, split="train", step_limit=step_limit)
    out: list[GoldExample] = []
    try:
        for v in env.variations[:n_variations]:
            out.extend(walk_gold(env, v))
    finally:
        env.close()
    return out


def _gold_worker(args: tuple[str, int, int]) -> str:
    run, task, n = args
    path = os.path.join(run, "gold", f"task{task:02d}.json")
    if not os.path.exists(path):
        ex = collect_gold(task, n)
        write_json(path, [asdict(e) for e in ex])
    return path


def ensure_ranker(run: str, cfg: RunConfig, pool: Any) -> RankerModel:
    path = os.path.join(run, "ranker.npz")
    if os.path.exists(path):
        return RankerModel.load(path)
    paths = list(pool.imap_unordered(_gold_worker, [(run, t, cfg.train_variations) for t in cfg.tasks]))
    examples = [GoldExample(**e) for p in sorted(paths) for e in read_json(p)]
    model, stats = train_ranker(examples)
    model.save(path)
    write_json(os.path.join(run, "ranker_train.json"), stats)
    return model


# ------------------------------------------------------------------ episodes
_WORKER: dict[str, Any] = {}


def _llm(cfg: RunConfig) -> Any:
    if "llm" not in _WORKER:
        from metacog_fast.llm import open_llm

        opts = {"n_threads": cfg.n_threads} if (cfg.llm is None or cfg.llm.startswith("llama-cpp")) else {}
        _WORKER["llm"] = open_llm(cfg.llm, **opts)
    return _WORKER["llm"]


def make_swift(kind: str, run: str, llm: LLM) -> RankerSwift | LLMSwift:
    if kind == "ranker":
        return RankerSwift(RankerModel.load(os.path.join(run, "ranker.npz")))
    return LLMSwift(llm)


def _open_store(path: str) -> Any:
    from metacog_fast.memory import MemoryStore

    return MemoryStore.open(path, dim=384, synchronous="NORMAL", num_threads=1)


def _copy_store(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    for suffix in ("", ".hnsw", ".hnsw.json"):
        if os.path.exists(src + suffix):
            shutil.copyfile(src + suffix, dst + suffix + ".part")
            os.replace(dst + suffix + ".part", dst + suffix)


def _task_worker(args: tuple[str, RunConfig, int]) -> dict[str, Any]:
    from metacog_fast.agents.scienceworld.agent import run_episode
    from metacog_fast.agents.scienceworld.amm import AMM
    from metacog_fast.envs import make_env
    from metacog_fast.envs.scienceworld_env import resolve_task

    run, cfg, task = args
    name = resolve_task(task)
    llm = _llm(cfg)
    swift = make_swift(cfg.swift, run, llm)
    done: list[str] = []
    t0 = time.perf_counter()
    warm_path = os.path.join(run, "memory", "warmup", f"{name}.sqlite")
    warm_marker = warm_path + ".done.json"
    if any(config_for(c).use_amm for c in cfg.configs) and not os.path.exists(warm_marker):
        env = make_env("scienceworld", task=task, split="train", step_limit=SIMULATOR_STEP_LIMIT)
        try:
            for p in (warm_path, warm_path + ".hnsw", warm_path + ".hnsw.json"):
                if os.path.exists(p):
                    os.unlink(p)
            os.makedirs(os.path.dirname(warm_path), exist_ok=True)
            store = _open_store(warm_path)
            vs = env.variations
            # train variations after the ones used for the ranker's gold paths
            warm_vars = [vs[(cfg.train_variations + i) % len(vs)] for i in range(cfg.warmup_per_task)]
            acfg = config_for("amm", swift=cfg.swift, max_steps=cfg.max_steps, budget_factor=cfg.budget_factor)
            results = []
            for v in warm_vars:
                res = run_episode(env, acfg, swift, llm, v, AMM(store, name, acfg.memory_k, cfg.memory_embed), "warmup")
                results.append(res.as_dict())
            store.close()
            write_json(warm_marker, {"episodes": results, "records": sum(r["mechanisms"]["memory_writes"] for r in results)})
        finally:
            env.close()
    env = make_env("scienceworld", task=task, split="test", step_limit=SIMULATOR_STEP_LIMIT)
    try:
        for v in env.variations[: cfg.variations]:
            for c in cfg.configs:
                path = episode_path(run, c, name, v)
                if os.path.exists(path):
                    continue
                acfg = config_for(c, swift=cfg.swift, max_steps=cfg.max_steps, budget_factor=cfg.budget_factor)
                amm = None
                store = None
                if acfg.use_amm:
                    # each AMM configuration continues from its own copy of the warm-up memory
                    sp = os.path.join(run, "memory", c, f"{name}.sqlite")
                    if not os.path.exists(sp):
                        _copy_store(warm_path, sp)
                    store = _open_store(sp)
                    amm = AMM(store, name, acfg.memory_k, cfg.memory_embed)
                try:
                    res = run_episode(env, acfg, swift, llm, v, amm, c)
                finally:
                    if store is not None:
                        store.close()
                write_json(path, res.as_dict())
                done.append(path)
    finally:
        env.close()
    return {"task": name, "episodes": len(done), "seconds": time.perf_counter() - t0}


class _Serial:
    """The pool interface, in process (workers=1)."""

    @staticmethod
    def imap_unordered(fn: Any, jobs: list[Any]) -> Any:
        return map(fn, jobs)


def run_protocol(run: str, cfg: RunConfig) -> dict[str, Any]:
    """Run (or resume) ``cfg`` into folder ``run``; returns a small summary."""
    cfg.validate()
    os.makedirs(run, exist_ok=True)
    meta_path = os.path.join(run, "run.json")
    if os.path.exists(meta_path):
        prev = read_json(meta_path)["config"]
        if prev != asdict(cfg):
            raise ValueError(f"run: {run} was started with a different configuration {prev}; use a new folder")
    else:
        write_json(meta_path, {"config": asdict(cfg), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    t0 = time.perf_counter()
    jobs = [(run, cfg, t) for t in cfg.tasks]
    if cfg.workers == 1:
        if cfg.swift == "ranker":
            ensure_ranker(run, cfg, _Serial())
        out = [_task_worker(j) for j in jobs]
    else:
        ctx = mp.get_context("spawn")
        with ctx.Pool(cfg.workers) as pool:
            if cfg.swift == "ranker":
                ensure_ranker(run, cfg, pool)
            out = list(pool.imap_unordered(_task_worker, jobs))
    return {"tasks": out, "seconds": time.perf_counter() - t0}
