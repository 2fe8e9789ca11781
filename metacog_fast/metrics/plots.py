"""Plots of the metrics (matplotlib, Agg backend), PNG written atomically
(temp file in the target folder, then os.replace). Rates are drawn with their interval as error
bars; ROC legends carry the AUROC2 interval and episode counts when given (docs/statistics.md)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from metacog_fast._atomic import atomic_tmp_path
from metacog_fast.metrics.type2 import auroc2, type2_roc

if TYPE_CHECKING:
    from metacog_fast.metrics.clustered import Auroc2Result


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


def plot_type2_roc(signal: Any, outcome: Any, path: str | os.PathLike, title: str = "Type-2 ROC",
                   result: Auroc2Result | None = None) -> Path:
    """Type-2 ROC curve of ``signal`` [N] against binary ``outcome`` [N], AUROC2 in the legend
    (with its interval and episode counts when ``result`` is given)."""
    return plot_type2_roc_curves({"": (signal, outcome)}, path, title, results={"": result} if result else None)


def _roc_label(signal: Any, outcome: Any, result: Auroc2Result | Mapping[str, Any] | None) -> str:
    if isinstance(result, Mapping):
        from metacog_fast.metrics.clustered import Auroc2Result as _R

        result = _R(**result)
    if result is None:
        return f"AUROC2 = {auroc2(signal, outcome):.3f}"
    if not result.defined:
        return f"AUROC2 undefined ({result.reason})"
    return (f"AUROC2 = {result.value:.3f} [{result.low:.3f}, {result.high:.3f}]\n"
            f"{result.positives} successful / {result.negatives} failed episodes")


def plot_type2_roc_curves(curves: Mapping[str, tuple[Any, Any]], path: str | os.PathLike,
                          title: str = "Type-2 ROC", results: Mapping[str, Any] | None = None) -> Path:
    """Several Type-2 ROC curves in one figure: ``{name: (signal [R], outcome [R])}``, AUROC2 of
    each in the legend; ``results`` ({name: Auroc2Result or its to_dict()}) adds the interval and
    episode counts."""
    if not curves:
        raise ValueError("curves: expected at least one (signal, outcome) pair, got an empty mapping")
    fig, ax = _figure()
    for name, (signal, outcome) in curves.items():
        fpr, tpr, _ = type2_roc(signal, outcome)
        label = _roc_label(signal, outcome, (results or {}).get(name))
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


def plot_rates_with_intervals(groups: Mapping[str, Mapping[str, Any]], path: str | os.PathLike,
                              ylabel: str = "success rate", title: str = "", scale: float = 1.0) -> Path:
    """Grouped bars with error bars: ``{series: {category: interval}}`` where an interval is a
    :class:`~metacog_fast.metrics.intervals.RateInterval`, a dict with ``rate``/``low``/``high``
    (e.g. ``to_dict()``), or None (category missing). One bar group per category, one bar per
    series; the error bar spans [low, high]. Values are multiplied by ``scale``."""
    if not groups:
        raise ValueError("groups: expected at least one series, got an empty mapping")
    cats = list(dict.fromkeys(c for g in groups.values() for c in g))
    if not cats:
        raise ValueError("groups: expected at least one category, got none")

    def parts(v: Any) -> tuple[float, float, float]:
        if v is None:
            return float("nan"), float("nan"), float("nan")
        d = v.to_dict() if hasattr(v, "to_dict") else v
        try:
            r, lo, hi = float(d["rate"]), float(d["low"]), float(d["high"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"groups: expected intervals with rate/low/high, got {v!r} ({exc})") from None
        if not lo <= r <= hi:
            raise ValueError(f"groups: expected low <= rate <= high, got {lo}, {r}, {hi}")
        return scale * r, scale * lo, scale * hi

    fig, ax = _figure()
    fig.set_size_inches(max(4.5, 0.6 * len(cats) * max(1, len(groups)) / 2 + 2.0), 4.0)
    width = 0.8 / len(groups)
    x = np.arange(len(cats))
    for i, (name, g) in enumerate(groups.items()):
        vals = np.array([parts(g.get(c)) for c in cats])
        r, lo, hi = vals[:, 0], vals[:, 1], vals[:, 2]
        ok = np.isfinite(r)
        xs = x + (i - (len(groups) - 1) / 2) * width
        ax.bar(xs[ok], r[ok], width, label=name)
        ax.errorbar(xs[ok], r[ok], yerr=np.vstack([r[ok] - lo[ok], hi[ok] - r[ok]]), fmt="none", ecolor="black",
                    capsize=3, lw=1)
    ax.set_xticks(x)
    ax.set_xticklabels(cats, rotation=45 if len(cats) > 3 else 0, ha="right" if len(cats) > 3 else "center",
                       fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, 1.05 * scale)
    if title:
        ax.set_title(title)
    if len(groups) > 1 or next(iter(groups)):
        ax.legend(fontsize=8)
    return _save_atomic(fig, path)
