"""The protocol: gold paths of train variations -> ranker; per task: AMM warm-up on train
variations, then every configuration on test variations. One episode = one JSON file; a run
folder resumes where it stopped. It goes through the one harness (``metacog_fast.runs``,
docs/runs.md): a prepare task per ScienceWorld task (its variations and gold states), the
ranker trained on the driver, then one task per ScienceWorld task (its AMM memories are shared
by its episodes); tasks run in this process, local worker processes (one JVM and one LLM each)
or on Ray.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from metacog_fast.scienceworld.config import CONFIG_NAMES, SWIFT_KINDS, config_for
from metacog_fast.scienceworld.store import write_json
from metacog_fast.runs import ExecutorConfig, Record, RunFolder, SideFile, Task, run_tasks
from metacog_fast.scienceworld.swift import GoldExample, LLMSwift, RankerModel, RankerSwift, train_ranker
from metacog_fast.envs.driver import play

if TYPE_CHECKING:
    from metacog_fast.envs.base import Env
    from metacog_fast.llm.protocol import LLM


SIMPLIFICATIONS = ("", "easy")
"""ScienceWorld settings a run may use: the paper's (no simplification) and SwiftSage's ``easy``."""

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
    """Evaluated variations per task (the first N of ``eval_split``)."""
    eval_split: str = "test"
    """Split the configurations are evaluated on: test (measures) or dev (tunes)."""
    max_steps: int = 50
    """Agent actions per episode: the floor of the budget (see ``budget_factor``)."""
    budget_factor: float = 1.5
    """Budget = max(max_steps, ceil(budget_factor x gold path length)) per variation; 0: flat max_steps."""
    train_variations: int = 1
    """Train variations per task whose gold paths train the ranker."""
    warmup_per_task: int = 2
    """AMM warm-up episodes per task (train variations; excluded from the metrics). 2 x 30 tasks = the paper's 60."""
    swift: str = "ranker"
    """Swift proposer: ranker, llm (lexical top-8) or llm-ranker (the LLM chooses among the ranker's top-8)."""
    workers: int = 1
    """Worker processes (tasks are spread over them); ``ExecutorConfig.workers`` overrides it."""
    llm: str | None = None
    """LLM URI (None: $METACOG_LLM, then the embedded SmolLM2-135M)."""
    n_threads: int = 1
    """llama.cpp threads per worker."""
    memory_embed: str = "hash"
    """AMM embeddings: hash (hashed words, 384-d) or minilm."""
    simplifications: str = ""
    """ScienceWorld simplifications of every environment of the run (gold paths, warm-up, test):
    "" = the paper's setting, "easy" = SwiftSage's (teleport, open doors, self-watering pots, no
    electrical actions); report them beside each other, never mixed in one folder."""
    sage_trigger: str = "situation"
    """When Sage is called: situation (stagnation, loop, low Swift margin) or fixed (run 3's rule); ``AgentConfig``."""
    stagnation_steps: int = 8
    """Steps without a score gain that call Sage (``sage_trigger=situation``)."""
    low_margin: float = 0.0
    """Ranker top-1 margin below which Sage is called (0: off)."""
    use_sage: bool = True
    """False: Swift-only (the Critic of SRM still acts)."""
    loop_guard: bool = True
    """Mask the actions of a strictly periodic loop for the next choice."""
    focus_guard: bool = True
    """``focus on X`` only where X is the task's target."""

    def agent_overrides(self) -> dict[str, Any]:
        """The ``AgentConfig`` fields this run sets for every configuration."""
        return {"swift": self.swift, "max_steps": self.max_steps, "budget_factor": self.budget_factor,
                "sage_trigger": self.sage_trigger, "stagnation_steps": self.stagnation_steps,
                "low_margin": self.low_margin, "use_sage": self.use_sage, "loop_guard": self.loop_guard,
                "focus_guard": self.focus_guard}

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
        if self.swift not in SWIFT_KINDS:
            raise ValueError(f"swift: expected one of {', '.join(SWIFT_KINDS)}, got {self.swift!r}")
        if self.eval_split not in ("dev", "test"):
            raise ValueError(f"eval_split: expected dev or test, got {self.eval_split!r}")
        if self.simplifications not in SIMPLIFICATIONS:
            raise ValueError(f"simplifications: expected one of {SIMPLIFICATIONS}, got {self.simplifications!r}")
        config_for("baseline", **self.agent_overrides())
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
def walk_gold(env: Env, variation: int, stats: dict[str, int] | None = None) -> list[GoldExample]:
    """Reset ``env`` to ``variation`` and follow its gold path, recording each state with the gold
    action's executable form (:func:`~metacog_fast.scienceworld.grounding.executable_form`: the
    valid-list form, or the gold text where the simulator accepted it, then added to the state's
    candidates). ``stats`` (optional) counts the mapping rules used; "unmapped" steps are left out."""
    from metacog_fast.scienceworld.amm import is_invalid
    from metacog_fast.scienceworld.grounding import candidate_actions, executable_form, is_ambiguity_question
    from metacog_fast.scienceworld.text import room_of

    obs, info = env.reset(variation=variation)
    out: list[GoldExample] = []
    executed: dict[str, int] = {}
    gold = iter(env.gold_path)
    last = ""
    room = room_of(obs)
    pending: list[Any] = []  # [example, gold text] of a step whose mapping waits for the simulator's answer

    def count(rule: str) -> None:
        if stats is not None:
            stats[rule or "valid"] = stats.get(rule or "valid", 0) + 1

    def policy(obs: str, info: dict[str, Any]) -> str | None:
        nonlocal last, room
        a = next(gold, None)
        if a is None:
            return None
        room = room_of(obs) or room
        valid = candidate_actions(list(info["admissible"]), obs)
        form, rule = executable_form(a, valid, room, obs)
        ex = GoldExample(info["task"], obs, last, valid, dict(executed), form or a)
        if form is not None:
            count(rule)
            out.append(ex)
        else:
            pending.append(ex)
        executed[a] = executed.get(a, 0) + 1
        last = a
        return a

    def observe(step: Any) -> None:
        if pending:
            ex = pending.pop()
            if is_invalid(step.obs) and not is_ambiguity_question(step.obs):
                count("unmapped")
            else:  # accepted as written: the gold text joins the state's candidates
                count("as given")
                ex.valid = ex.valid + [ex.gold]
                out.append(ex)

    play(env, policy, None, start=(obs, info), on_step=observe)
    return out


def collect_gold(task: int, n_variations: int, step_limit: int = 200, simplifications: str = "") -> list[GoldExample]:
    """Walk the gold paths of the first ``n_variations`` train variations, recording each state."""
    from metacog_fast.envs import make_env

    env = make_env("scienceworld", task=task, split="train", step_limit=step_limit, simplifications=simplifications)
    out: list[GoldExample] = []
    try:
        for v in env.variations[:n_variations]:
            out.extend(walk_gold(env, v))
    finally:
        env.close()
    return out


# ------------------------------------------------------------------ harness tasks
def plan_key(name: str) -> str:
    """Record of a task's variations (written by the prepare phase)."""
    return f"tasks/{name}"


def gold_key(task: int) -> str:
    return f"gold/task{task:02d}"


def warmup_key(name: str) -> str:
    return f"memory/warmup/{name}.sqlite.done"


def episode_key(config: str, name: str, variation: int) -> str:
    return f"episodes/{config}/{name}__{variation}"


def prepare_task(payload: dict[str, Any], done: Mapping[str, Any], workdir: Path) -> Iterator[Record]:
    """Task function: a task's train and test variations, and (ranker proposer) the states along
    the gold paths of its first ``train_variations`` train variations."""
    from metacog_fast.envs import make_env
    from metacog_fast.scienceworld.env import resolve_task

    task, name = payload["task"], resolve_task(payload["task"])
    if plan_key(name) not in done:
        split = payload.get("split", "test")
        test = make_env("scienceworld", task=task, split=split, step_limit=SIMULATOR_STEP_LIMIT,
                        simplifications=payload.get("simplifications", ""), gold_path=False)
        try:
            test_vars = test.variations
        finally:
            test.close()
        # "test_variations" keeps run 3's record name; "split" says which split they are
        yield Record(plan_key(name), {"task": name, "index": task, "test_variations": test_vars, "split": split})
    if payload["gold"] and gold_key(task) not in done:
        yield Record(gold_key(task), [asdict(e) for e in collect_gold(task, payload["train_variations"],
                                                                      simplifications=payload.get("simplifications", ""))])


def _open_store(path: str) -> Any:
    from metacog_fast.memory import MemoryStore

    return MemoryStore.open(path, dim=384, synchronous="NORMAL", num_threads=1)


def _store_files(path: str) -> list[str]:
    """A closed store's files: the SQLite database and its HNSW index."""
    return [path + s for s in ("", ".hnsw", ".hnsw.json")]


def _side_files(workdir: Path, path: str) -> list[SideFile]:
    return [f for p in _store_files(path) for f in SideFile.collect(workdir, p)]


def _copy_store(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", ".hnsw", ".hnsw.json"):
        if os.path.exists(f"{src}{suffix}"):
            shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")


_WORKER: dict[str, Any] = {}


def _llm(cfg: RunConfig) -> Any:
    """The worker process's LLM, opened once and kept for its later tasks."""
    if "llm" not in _WORKER:
        from metacog_fast.llm import open_llm
        from metacog_fast.llm.uri import is_embedded

        opts = {"n_threads": cfg.n_threads} if is_embedded(cfg.llm) else {}
        _WORKER["llm"] = open_llm(cfg.llm, **opts)
    return _WORKER["llm"]


def make_swift(kind: str, workdir: str | Path, llm: LLM) -> RankerSwift | LLMSwift:
    if kind == "llm":
        return LLMSwift(llm)
    ranker = RankerSwift(RankerModel.load(os.path.join(workdir, "ranker.npz")))
    return ranker if kind == "ranker" else LLMSwift(llm, ranker=ranker)


def play_task(payload: dict[str, Any], done: Mapping[str, Any], workdir: Path) -> Iterator[Record | SideFile]:
    """Task function: one task's AMM warm-up (train variations), then every configuration on its
    test variations. Memory stores live in ``workdir`` (the run folder's copies come in as the
    task's inputs) and go back to the run folder before each record."""
    from metacog_fast.scienceworld.agent import run_episode
    from metacog_fast.scienceworld.amm import AMM
    from metacog_fast.envs import make_env

    cfg = RunConfig(**payload["config"])
    task, name, variations = payload["task"], payload["name"], payload["variations"]
    # Swift-only ranker runs without the SRM Critic call no LLM: none is opened
    needs_llm = cfg.use_sage or cfg.swift != "ranker" or any(config_for(c).use_srm for c in cfg.configs)
    llm = _llm(cfg) if needs_llm else None
    swift = make_swift(cfg.swift, workdir, llm)
    warm_rel = f"memory/warmup/{name}.sqlite"
    warm_path = workdir / warm_rel
    if any(config_for(c).use_amm for c in cfg.configs) and warmup_key(name) not in done:
        env = make_env("scienceworld", task=task, split="train", step_limit=SIMULATOR_STEP_LIMIT,
                       simplifications=cfg.simplifications)
        try:
            for p in _store_files(str(warm_path)):
                if os.path.exists(p):
                    os.unlink(p)
            warm_path.parent.mkdir(parents=True, exist_ok=True)
            store = _open_store(str(warm_path))
            vs = env.variations
            # train variations after the ones used for the ranker's gold paths
            warm_vars = [vs[(cfg.train_variations + i) % len(vs)] for i in range(cfg.warmup_per_task)]
            acfg = config_for("amm", **cfg.agent_overrides())
            results = []
            for v in warm_vars:
                res = run_episode(env, acfg, swift, llm, v, AMM(store, name, acfg.memory_k, cfg.memory_embed), "warmup")
                results.append(res.as_dict())
            store.close()
        finally:
            env.close()
        yield from _side_files(workdir, warm_rel)
        yield Record(warmup_key(name), {"episodes": results,
                                        "records": sum(r["mechanisms"]["memory_writes"] for r in results)})
    env = make_env("scienceworld", task=task, split=cfg.eval_split, step_limit=SIMULATOR_STEP_LIMIT,
                   simplifications=cfg.simplifications)
    try:
        for v in variations:
            for c in cfg.configs:
                key = episode_key(c, name, v)
                if key in done:
                    continue
                acfg = config_for(c, **cfg.agent_overrides())
                amm = store = None
                rel = f"memory/{c}/{name}.sqlite"
                if acfg.use_amm:
                    # each AMM configuration continues from its own copy of the warm-up memory
                    if not (workdir / rel).exists():
                        _copy_store(warm_path, workdir / rel)
                    store = _open_store(str(workdir / rel))
                    amm = AMM(store, name, acfg.memory_k, cfg.memory_embed)
                try:
                    res = run_episode(env, acfg, swift, llm, v, amm, c)
                finally:
                    if store is not None:
                        store.close()
                if store is not None:
                    yield from _side_files(workdir, rel)
                yield Record(key, res.as_dict())
    finally:
        env.close()


def ensure_ranker(folder: RunFolder, cfg: RunConfig) -> RankerModel:
    """The imitation ranker, trained on the driver from the gold records (once per run)."""
    path = folder.root / "ranker.npz"
    if path.exists():
        return RankerModel.load(str(path))
    examples = [GoldExample(**e) for t in sorted(cfg.tasks) for e in folder.read(gold_key(t))]
    model, stats = train_ranker(examples)
    model.save(str(path))
    write_json(str(folder.root / "ranker_train.json"), stats)
    return model


def run_protocol(run: str, cfg: RunConfig, executor: ExecutorConfig | None = None) -> dict[str, Any]:
    """Run (or resume) ``cfg`` into folder ``run``; returns a small summary. ``executor``: where
    the tasks run (default: in this process for ``cfg.workers`` = 1, else that many local processes)."""
    from metacog_fast.scienceworld.env import resolve_task

    cfg.validate()
    from metacog_fast.llm.models import models_identity

    folder = RunFolder(run, asdict(cfg), ignore=("workers",), snapshot="run.json",
                       extra={"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                       identity=models_identity(llm=cfg.llm))
    t0 = time.perf_counter()
    gold = cfg.swift != "llm" and not (folder.root / "ranker.npz").exists()
    names = {t: resolve_task(t) for t in cfg.tasks}
    prep = [Task(f"prepare/{t}", {"task": t, "gold": gold, "train_variations": cfg.train_variations,
                                  "split": cfg.eval_split, "simplifications": cfg.simplifications},
                 (plan_key(names[t]),) + ((gold_key(t),) if gold else ())) for t in cfg.tasks]
    run_tasks(folder, prep, prepare_task, executor, family_workers=cfg.workers, desc="scienceworld/prepare")
    if cfg.swift != "llm":
        ensure_ranker(folder, cfg)
    uses_amm = any(config_for(c).use_amm for c in cfg.configs)
    tasks = []
    for t in cfg.tasks:
        name = names[t]
        variations = folder.read(plan_key(name))["test_variations"][: cfg.variations]
        keys = ((warmup_key(name),) if uses_amm else ()) + tuple(
            episode_key(c, name, v) for v in variations for c in cfg.configs)
        inputs = ("ranker.npz",) + tuple(p for c in ("warmup", *cfg.configs)
                                         for p in _store_files(f"memory/{c}/{name}.sqlite"))
        tasks.append(Task(name, {"config": asdict(cfg), "task": t, "name": name, "variations": variations},
                          keys, inputs=inputs))
    played: dict[str, int] = {}

    def count(key: str, _rec: Any) -> None:
        if key.startswith("episodes/"):
            name = key.rsplit("/", 1)[1].rsplit("__", 1)[0]
            played[name] = played.get(name, 0) + 1

    summary = run_tasks(folder, tasks, play_task, executor, family_workers=cfg.workers, desc="scienceworld",
                        on_record=count)
    return {"tasks": [{"task": names[t], "episodes": played.get(names[t], 0)} for t in cfg.tasks],
            "seconds": time.perf_counter() - t0, "harness": summary.as_dict()}
