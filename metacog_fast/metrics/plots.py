"""Plots of the metrics (matplotlib, Agg backend), PNG written atomically
(temp file in the target folder, then os.replace)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from metacog_fast._atomic import atomic_tmp_path
from metacog_fast.metrics.type2 import auroc2, type2_roc


def _save_atomic(fig: Any, path: str | os.PathLike) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_tmp_path(out, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    return out


def _figure() -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.5, 4.0))
    return fig, fig.add_subplot(1, 1, 1)


def plot_type2_roc(signal: Any, outcome: Any, path: str | os.PathLike, title: str = "Type-2 ROC") -> Path:
    """Type-2 ROC curve of ``signal`` [N] against binary ``outcome`` [N], AUROC2 in the legend."""
    return plot_type2_roc_curves({"": (signal, outcome)}, path, title)


def plot_type2_roc_curves(curves: Mapping[str, tuple[Any, Any]], path: str | os.PathLike,
                          title: str = "Type-2 ROC") -> Path:
    """Several Type-2 ROC curves in one figure: ``{name: (signal [R], outcome [R])}``, AUROC2 of
    each in the legend."""
    if not curves:
        raise ValueError("curves: expected at least one (signal, outcome) pair, got an empty mapping")
    fig, ax = _figure()
    for name, (signal, outcome) in curves.items():
        fpr, tpr, _ = type2_roc(signal, outcome)
        label = f"AUROC2 = {auroc2(signal, outcome):.3f}"
        ax.plot(fpr, tpr, lw=2, label=f"{name}: {label}" if name else label)
    ax.plot([0, 1], [0, 1], ls="--", c="grey", lw=1, label="chance")
    ax.set_xlabel("false positive rate (failures judged successes)")
    ax.set_ylabel("true positive rate")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8 if len(curves) > 1 else None)
    return _save_atomic(fig, path)


def plot_task_bars(values: Mapping[str, float], path: str | os.PathLike, ylabel: str = "success rate",
                   title: str = "") -> Path:
    """One bar per task (``{task: value}``), e.g. per-task success rate."""
    if not values:
        raise ValueError("values: expected at least one task, got an empty mapping")
    names = list(values)
    vals = np.asarray([float(values[k]) for k in names], dtype=np.float64)
    if not np.isfinite(vals).all():
        raise ValueError("values: contains NaN or infinite values")
    fig, ax = _figure()
    fig.set_size_inches(max(4.5, 0.45 * len(names) + 1.5), 4.0)
    ax.bar(np.arange(len(names)), vals)
    ax.set_xticks(np.arange(len(names)))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    return _save_atomic(fig, path)
