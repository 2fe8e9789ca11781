"""A learning run packed small enough to commit, and unpacked on another machine to go on
(``metacog train pack`` / ``metacog train unpack``).

A run folder at 100k env steps is ~45-49 MB of checkpoint (fp32 weights and Adam moments) plus
~26 MB of replay (observations of every step). The pack keeps:

* ``state.safetensors``: the model's fp32 weights, the Adam moments in bf16 (``moments="bf16"``,
  the default; "fp32" keeps them exact) and the step counts, with the runner state of the
  checkpoint (env steps, episodes, updates, RNG states) in ``pack.json``;
* ``replay.npz``: every training episode as its actions (float32, what the env needs to replay
  it), its reset seed (a function of the run seed and the episode index), its source and the
  psi it recorded (fp16), plus a sha256 of its observations, rewards and success flags.
  Packing re-simulates each episode (``env.reset(seed)`` then the actions) and stores the
  observations of those that do not reproduce in full, so unpacking never depends on them;
* the run's small files (``config.json``, ``evals/*.json``, curves).

Unpacking re-simulates the episodes into ``replay/ep_*.npz`` and checks each against its sha256.
An episode that re-simulates differently on this machine (MuJoCo on another CPU) keeps the
re-simulated data: the count and the episodes are written to ``unpack.json`` and warned about,
never hidden. With bf16 moments the resumed run does not continue bit for bit (the moments were
rounded); with fp32 moments it does (tested).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from metacog_fast._atomic import atomic_open, atomic_write_bytes
from metacog_fast._integrity import sha256_file, verify_file
from metacog_fast.metaworld.env import MT10_TASKS, NOVEL_TASKS, MetaWorldEnv
from metacog_fast.metaworld.learn.config import LearnConfig
from metacog_fast.metaworld.train import checkpoint as ck
from metacog_fast.metaworld.train.replay import Episode, EpisodeRecorder

FORMAT = "metacog_fast.learn.pack/1"
MOMENTS = ("bf16", "fp32")
SMALL_FILES = ("config.json", "curve.json", "curve.csv", "train_curve.csv")


@dataclass
class PackConfig:
    """``metacog train pack``: a learning run packed small enough to commit."""

    run_dir: str = ""
    """The `metacog train learn` run folder (its latest checkpoint and the replay up to it)."""
    out: str = ""
    """Folder to write the pack into (pack.json, state.safetensors, replay.npz, run/)."""
    moments: str = "bf16"
    """Adam moments: "bf16" (half the size; the resumed run continues approximately) or "fp32"
    (the resumed run continues bit for bit)."""
    progress: bool = True
    """Show a progress bar over the episodes (each is re-simulated to check it reproduces)."""

    def validate(self) -> "PackConfig":
        if not self.run_dir or not self.out:
            raise ValueError("run_dir / out: expected the run folder and the folder to write the pack into")
        if self.moments not in MOMENTS:
            raise ValueError(f"moments: expected one of {MOMENTS}, got {self.moments!r}")
        return self


@dataclass
class UnpackConfig:
    """``metacog train unpack``: a pack rebuilt into a run folder that `metacog train learn` resumes."""

    pack: str = ""
    """The folder `metacog train pack` wrote."""
    run_dir: str = ""
    """A new (or empty) folder for the rebuilt run."""
    progress: bool = True
    """Show a progress bar over the episodes being re-simulated."""

    def validate(self) -> "UnpackConfig":
        if not self.pack or not self.run_dir:
            raise ValueError("pack / run_dir: expected the pack folder and a new run folder")
        return self


def reset_seed(cfg: LearnConfig, episode: int) -> int:
    """The training layout of episode ``episode`` (as :class:`LearnRunner` draws it)."""
    return int(cfg.seed * 1_000_003 + episode)


def episode_digest(ep: Episode) -> str:
    """sha256 of what the env produced in an episode: observations, rewards, success flags."""
    h = hashlib.sha256()
    for a in (np.ascontiguousarray(ep.obs, np.float32), np.ascontiguousarray(ep.reward, np.float32),
              np.ascontiguousarray(ep.success, bool)):
        h.update(a.tobytes())
    return h.hexdigest()


def make_env(cfg: LearnConfig) -> MetaWorldEnv:
    """The env of a learning run (as :class:`LearnRunner` makes it)."""
    one_hot = cfg.task in MT10_TASKS + NOVEL_TASKS
    return MetaWorldEnv(task=cfg.task, seed=cfg.seed, max_episode_steps=cfg.max_episode_steps,
                        zero_task_embedding=not one_hot)


def resimulate(env: MetaWorldEnv, seed: int, actions: np.ndarray, task: str, T_max: int, source: str) -> Episode:
    """The episode that ``actions`` [T, A] produce from ``env.reset(seed=seed)``."""
    obs, info = env.reset(seed=seed)
    rec = EpisodeRecorder(obs, actions.shape[1], info.get("task", task), T_max, source)
    for a in actions:
        obs, reward, _, info = env.step(np.asarray(a, np.float32))
        rec.add(obs, a, reward, info["success"])
    return rec.finish()


def _load_run(run_dir: Path) -> tuple[LearnConfig, dict[str, Any], Path]:
    stem = run_dir / "ckpt" / "latest"
    if not stem.with_suffix(".json").exists():
        raise ValueError(f"run_dir: {run_dir} has no checkpoint (ckpt/latest.json); nothing to pack")
    doc = json.loads(stem.with_suffix(".json").read_text())
    try:
        cfg = LearnConfig.from_dict(doc["config"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"run_dir: {stem}.json is not a learning run's checkpoint ({exc})") from None
    return cfg, doc, stem


def pack_run(run_dir: str | os.PathLike, out: str | os.PathLike, moments: str = "bf16",
             progress: bool = False) -> dict[str, Any]:
    """Pack the learning run in ``run_dir`` (its latest checkpoint and the replay up to it) into
    ``out``. Returns the pack's manifest (also ``out/pack.json``)."""
    import torch
    from safetensors.torch import save_file

    if moments not in MOMENTS:
        raise ValueError(f"moments: expected one of {MOMENTS}, got {moments!r}")
    run_dir, out = Path(run_dir), Path(out)
    cfg, doc, stem = _load_run(run_dir)
    meta = doc.get("meta") or {}
    n_eps = int(meta.get("episodes", 0))
    if out.exists() and any(out.iterdir()) and not (out / "pack.json").exists():
        raise ValueError(f"out: {out} exists and is not a pack (no pack.json); pick another folder")
    out.mkdir(parents=True, exist_ok=True)

    tensors = ck.read_tensors(stem, doc)  # checked against the checkpoint's digest first
    packed: dict[str, torch.Tensor] = {}
    for k, v in tensors.items():
        if moments == "bf16" and k.startswith("opt.") and k.rsplit(".", 1)[-1] in ("exp_avg", "exp_avg_sq"):
            packed[k] = v.to(torch.bfloat16).contiguous()
        else:
            packed[k] = v.contiguous()
    st_path = out / "state.safetensors"
    from metacog_fast._atomic import atomic_tmp_path

    with atomic_tmp_path(st_path) as tmp:
        save_file(packed, str(tmp), metadata={"format": FORMAT, "moments": moments})

    env = make_env(cfg)
    arrays: dict[str, np.ndarray] = {}
    digests, sources, stored = [], [], []
    it = range(n_eps)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc=f"pack {run_dir.name}", unit="episode")
    try:
        for i in it:
            ep = Episode.load(run_dir / "replay" / f"ep_{i:06d}.npz")
            actions = np.ascontiguousarray(ep.prev_action[1:], np.float32)
            arrays[f"actions_{i}"] = actions
            for k, v in ep.extra.items():
                arrays[f"extra_{k}_{i}"] = np.asarray(v, np.float16)
            d = episode_digest(ep)
            digests.append(d)
            sources.append(ep.source)
            again = resimulate(env, reset_seed(cfg, i), actions, ep.task, ep.T_max, ep.source)
            if episode_digest(again) != d:  # does not reproduce here: keep what the env gave
                stored.append(i)
                arrays[f"obs_{i}"], arrays[f"reward_{i}"] = ep.obs, ep.reward
                arrays[f"success_{i}"] = ep.success
    finally:
        env.close()
    arrays["digests"] = np.array(digests)
    arrays["sources"] = np.array(sources)
    rp_path = out / "replay.npz"
    with atomic_open(rp_path, "wb") as f:
        np.savez_compressed(f, **arrays)

    small = []
    for name in SMALL_FILES:
        if (run_dir / name).is_file():
            small.append(name)
    small += sorted(f"evals/{p.name}" for p in (run_dir / "evals").glob("*.json")) if (run_dir / "evals").is_dir() else []
    for rel in small:
        (out / "run" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(run_dir / rel, out / "run" / rel)
    manifest = {
        "format": FORMAT, "config": doc["config"], "meta": meta, "moments": moments,
        "state": {"file": st_path.name, "sha256": sha256_file(st_path), "bytes": st_path.stat().st_size},
        "replay": {"file": rp_path.name, "sha256": sha256_file(rp_path), "bytes": rp_path.stat().st_size,
                   "episodes": n_eps, "stored_in_full": stored},
        "files": small, "source": {"run_dir": str(run_dir), "checkpoint_sha256": doc.get("sha256")},
    }
    atomic_write_bytes(out / "pack.json", (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    return manifest


def unpack_run(pack: str | os.PathLike, run_dir: str | os.PathLike, progress: bool = False) -> dict[str, Any]:
    """Rebuild a learning run folder from ``pack`` into ``run_dir`` (which must not hold a run);
    ``metacog train learn --run-dir RUN_DIR`` with the same config then resumes it. Returns what
    happened (also ``run_dir/unpack.json``): episodes re-simulated, taken in full, mismatched."""
    import torch

    pack, run_dir = Path(pack), Path(run_dir)
    mj = pack / "pack.json"
    if not mj.is_file():
        raise ValueError(f"pack: {pack} holds no pack.json (expected a folder written by `metacog train pack`)")
    man = json.loads(mj.read_text())
    if man.get("format") != FORMAT:
        raise ValueError(f"pack: {mj} has format {man.get('format')!r}; this package reads {FORMAT!r}")
    if run_dir.exists() and any(run_dir.iterdir()):
        raise ValueError(f"run_dir: {run_dir} is not empty; unpack into a new folder")
    remedy = "copy the pack again from where it was committed"
    for part in ("state", "replay"):
        verify_file(pack / man[part]["file"], sha256=man[part]["sha256"], size=man[part]["bytes"], manifest=str(mj),
                    remedy=remedy)
    cfg = LearnConfig.from_dict(man["config"])
    from safetensors.torch import load_file

    tensors = {k: (v.float() if v.dtype == torch.bfloat16 else v) for k, v in
               load_file(str(pack / man["state"]["file"])).items()}
    run_dir.mkdir(parents=True, exist_ok=True)
    for rel in man.get("files", []):
        (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pack / "run" / rel, run_dir / rel)
    (run_dir / "replay").mkdir(exist_ok=True)
    n_eps = int(man["replay"]["episodes"])
    mismatched, full = [], []
    env = make_env(cfg)
    it = range(n_eps)
    if progress:
        from tqdm import tqdm

        it = tqdm(it, desc=f"unpack {run_dir.name}", unit="episode")
    try:
        with np.load(pack / man["replay"]["file"]) as z:
            digests, sources = [str(d) for d in z["digests"]], [str(s) for s in z["sources"]]
            extras = sorted({k[len("extra_"):].rsplit("_", 1)[0] for k in z.files if k.startswith("extra_")})
            for i in it:
                actions = z[f"actions_{i}"]
                if f"obs_{i}" in z.files:
                    full.append(i)
                    act = np.concatenate([np.zeros((1, actions.shape[1]), np.float32), actions])
                    ep = Episode(obs=z[f"obs_{i}"], prev_action=act, reward=z[f"reward_{i}"], success=z[f"success_{i}"],
                                 task=cfg.task, T_max=cfg.max_episode_steps, source=sources[i])
                else:
                    ep = resimulate(env, reset_seed(cfg, i), actions, cfg.task, cfg.max_episode_steps, sources[i])
                    if episode_digest(ep) != digests[i]:
                        mismatched.append(i)
                for name in extras:
                    if f"extra_{name}_{i}" in z.files:
                        ep.extra[name] = z[f"extra_{name}_{i}"].astype(np.float32)
                ep.save(run_dir / "replay" / f"ep_{i:06d}.npz")
    finally:
        env.close()
    (run_dir / "ckpt").mkdir(exist_ok=True)
    ck.save_tensors(run_dir / "ckpt" / "latest", tensors, man["config"], man["meta"], versioned=True,
                    agent=cfg.agent)
    report = {"pack": str(pack), "episodes": n_eps, "resimulated": n_eps - len(full), "stored_in_full": full,
              "mismatched": mismatched, "moments": man["moments"]}
    atomic_write_bytes(run_dir / "unpack.json", (json.dumps(report, indent=2) + "\n").encode())
    if mismatched:
        warnings.warn(f"unpack: {len(mismatched)} of {n_eps} episodes re-simulated differently on this machine "
                      f"(episodes {mismatched[:10]}...); their re-simulated data is used (run_dir/unpack.json)",
                      RuntimeWarning, stacklevel=2)
    return report
