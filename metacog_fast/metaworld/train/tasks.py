"""The Meta-World protocol on the one run harness (``metacog_fast.runs``, docs/runs.md): one task
per agent. An agent's protocol is a single sequential training run (its model, replay and RNG
states evolve with every episode), so it is one task. Agents train in parallel on any executor.

A task trains in its scratch folder. The agent's folder from the run folder (config, checkpoint,
replay) comes in as its input. After every checkpoint the files that changed go back as side
files: replay episodes first, the tensors next, the checkpoint JSON last. So the driver's copy is
always a complete checkpoint. ``state.json`` (written when the agent is done) is the task's record.
"""
from __future__ import annotations

import json
import queue
import threading
from pathlib import Path
from typing import Any, Iterator, Mapping

from metacog_fast.runs import ExecutorConfig, Record, RunFolder, SideFile, Task, run_tasks
from metacog_fast.metaworld.train.config import ProtocolConfig


def state_key(sub: str) -> str:
    """The record of an agent's finished protocol: ``<sub>/state.json``."""
    return f"{sub}/state"


def _signature(p: Path) -> tuple[int, int]:
    st = p.stat()
    return st.st_size, st.st_mtime_ns


def _order(path: str) -> tuple[bool, bool, str]:
    # replay and tensors before JSON, the checkpoint JSON (which names the tensors' digest) last
    return path.endswith(".json"), path.endswith("latest.json"), path


def _changed(workdir: Path, sub: str, sent: dict[str, tuple[int, int]]) -> list[SideFile]:
    """Files of ``workdir/sub`` new or changed since last sent (state.json is the record)."""
    out = []
    for p in sorted((workdir / sub).rglob("*")):
        rel = p.relative_to(workdir).as_posix()
        if not p.is_file() or p.name.startswith(".") or rel == f"{sub}/state.json":
            continue
        sig = _signature(p)
        if sent.get(rel) != sig:
            out.append(SideFile(rel, p.read_bytes()))
            sent[rel] = sig
    return sorted(out, key=lambda f: _order(f.path))


def train_agent(payload: Mapping[str, Any], done: Mapping[str, Any], workdir: Path) -> Iterator[Record | SideFile]:
    """Task function: run (or resume) one agent's protocol in ``workdir/<sub>``."""
    from metacog_fast.metaworld.train.runner import ProtocolRunner

    sub = payload["sub"]
    cfg = ProtocolConfig.from_dict(payload["config"])
    pretrained = None
    if payload.get("pretrained_files"):
        for rel, data in payload["pretrained_files"].items():
            (workdir / "pretrained_src" / rel).parent.mkdir(parents=True, exist_ok=True)
            (workdir / "pretrained_src" / rel).write_bytes(data)
        pretrained = workdir / "pretrained_src" / payload["pretrained_stem"]
    (workdir / sub).mkdir(parents=True, exist_ok=True)
    sent = {p.relative_to(workdir).as_posix(): _signature(p) for p in (workdir / sub).rglob("*") if p.is_file()}
    batches: queue.Queue = queue.Queue(maxsize=2)  # the trainer waits while the driver is behind
    outcome: dict[str, Any] = {}

    def on_checkpoint() -> None:  # in the trainer's thread: files are read before it goes on
        batches.put(_changed(workdir, sub, sent))

    def train() -> None:
        try:
            ProtocolRunner(cfg, workdir / sub, progress=False, pretrained=pretrained, on_checkpoint=on_checkpoint).run()
        except BaseException as exc:  # handed to the generator, which raises it
            outcome["error"] = exc
        finally:
            batches.put(None)

    thread = threading.Thread(target=train, name=f"train-{sub}", daemon=True)
    thread.start()
    while (batch := batches.get()) is not None:
        yield from batch
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    yield Record(state_key(sub), json.loads((workdir / sub / "state.json").read_text()))


def _pretrained_files(stem: Path) -> dict[str, bytes]:
    """A pre-trained checkpoint and the pre-deployment replay beside it (the runner reads both)."""
    out = {}
    for suffix in (".json", ".safetensors"):
        p = stem.with_suffix(suffix)
        if not p.is_file():
            raise ValueError(f"pretrained: {p} is missing (expected <stem>.json and <stem>.safetensors)")
        out[p.name] = p.read_bytes()
    replay = stem.parent / "replay" / "pretrain"
    for p in sorted(replay.glob("ep_*.npz")) if replay.is_dir() else []:
        out[f"replay/pretrain/{p.name}"] = p.read_bytes()
    return out


def run_agents(run_root: str | Path, agents: Mapping[str, ProtocolConfig], executor: ExecutorConfig | None = None,
               pretrained: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Run (or resume) each agent's protocol in ``run_root/<name>`` (names are the keys of
    ``agents``), one harness task per agent; ``pretrained``: a pre-trained checkpoint stem to
    adapt from (adaptation only). Returns each agent's final state (``<name>/state.json``)."""
    folder = RunFolder(run_root, None)
    for sub, cfg in agents.items():
        if not sub or "/" in sub or sub.startswith("."):
            raise ValueError(f"agents: expected plain folder names as keys, got {sub!r}")
        RunFolder(folder.root / sub, cfg.to_dict())  # a different configuration is refused here, on the driver
    extra: dict[str, Any] = {}
    if pretrained is not None:
        stem = Path(pretrained)
        extra = {"pretrained_files": _pretrained_files(stem), "pretrained_stem": stem.name}
    tasks = [Task(sub, {"sub": sub, "config": cfg.to_dict(), **extra}, (state_key(sub),), inputs=(sub,))
             for sub, cfg in agents.items()]
    run_tasks(folder, tasks, train_agent, executor, family_workers=1, desc="metaworld")
    return {sub: folder.read(state_key(sub)) for sub in agents}
