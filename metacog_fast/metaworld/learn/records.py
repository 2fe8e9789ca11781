"""The records of a learning run, read back and written as curves.

A run folder holds one record per evaluation, ``evals/<env_steps:09d>.json`` (written once,
atomically, by :class:`metacog_fast.runs.RunFolder`), and, rewritten atomically after each
evaluation, ``curve.json`` (all of them, in step order) and ``curve.csv`` (one row per evaluation:
env_steps, success rate and Wilson interval at any step and at the last step, mean return). The
training episodes' returns go to ``train_curve.csv`` at each checkpoint.
"""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from metacog_fast._atomic import atomic_write_bytes
from metacog_fast.runs.records import read_json, write_json_atomic

__all__ = ["CURVE_COLUMNS", "eval_key", "read_curve", "write_curves", "write_train_curve"]

CURVE_COLUMNS = ("task", "seed", "env_steps", "updates", "n", "success", "success_low", "success_high",
                 "final_success", "final_success_low", "final_success_high", "return_mean")
"""Columns of ``curve.csv``."""


def eval_key(env_steps: int) -> str:
    """RunFolder record key of the evaluation at ``env_steps``."""
    return f"evals/{env_steps:09d}"


def read_curve(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The evaluation records of a run folder in step order (ValueError if it holds none)."""
    folder = Path(run_dir) / "evals"
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise ValueError(f"run_dir: {run_dir} holds no evaluation records (evals/*.json)")
    return [read_json(p) for p in files]


def _csv_bytes(columns: Iterable[str], rows: Iterable[Mapping[str, Any]]) -> bytes:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue().encode()


def curve_row(rec: Mapping[str, Any]) -> dict[str, Any]:
    """One ``curve.csv`` row of an evaluation record."""
    s, f = rec["success"], rec["final_success"]
    return {"task": rec["task"], "seed": rec["seed"], "env_steps": rec["env_steps"], "updates": rec["updates"],
            "n": rec["n"], "success": s["rate"], "success_low": round(s["low"], 6),
            "success_high": round(s["high"], 6), "final_success": f["rate"],
            "final_success_low": round(f["low"], 6), "final_success_high": round(f["high"], 6),
            "return_mean": round(rec["return_mean"], 4)}


def write_curves(run_dir: str | os.PathLike, out: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """(Re)write ``curve.json`` and ``curve.csv`` of ``run_dir`` (into ``out`` when given)."""
    recs = read_curve(run_dir)
    dest = Path(out) if out is not None else Path(run_dir)
    write_json_atomic(dest / "curve.json", recs)
    atomic_write_bytes(dest / "curve.csv", _csv_bytes(CURVE_COLUMNS, (curve_row(r) for r in recs)))
    return recs


def write_train_curve(run_dir: str | os.PathLike, episodes: list[Mapping[str, Any]]) -> None:
    """``train_curve.csv``: one row per training episode (episode, env_steps, return, success, source)."""
    cols = ("episode", "env_steps", "return", "success", "source")
    atomic_write_bytes(Path(run_dir) / "train_curve.csv", _csv_bytes(cols, episodes))
