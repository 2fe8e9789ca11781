"""Metrics shared by the agents: Type-2 (metacognitive) AUROC and ROC, metacognitive
accuracy, quantile labels, success rate, tasks solved, steps to success, intervals and paired
tests, AUROC2 with a cluster-bootstrap interval and within task type, an assessor against trivial
predictors (assessor.py), plots (docs/statistics.md)."""
from __future__ import annotations

from metacog_fast.metrics.assessor import (
    AssessorReport,
    Calibration,
    PairedAuroc2,
    PredictorResult,
    TrivialPredictions,
    calibration,
    cross_fitted_trivial,
    evaluate_assessor,
    game_folds,
    paired_auroc2_difference,
    plot_reliability,
)
from metacog_fast.metrics.claims import claims_markdown, evaluate_claim, evaluate_claims, parse_claim
from metacog_fast.metrics.clustered import (
    MIN_EPISODES,
    Auroc2ByType,
    Auroc2Result,
    accuracy_clustered,
    auroc2_clustered,
    auroc2_within_types,
)
from metacog_fast.metrics.comparisons import comparisons_markdown, pairwise_comparisons
from metacog_fast.metrics.intervals import (
    PairedDifference,
    RateInterval,
    compare_paired,
    format_p,
    mcnemar_exact,
    mean_interval,
    p_cell,
    paired_bootstrap,
    rate_with_interval,
    success_interval,
    wilson_interval,
)
from metacog_fast.metrics.outcomes import (
    mean_steps_charged,
    mean_steps_to_success,
    quantile_labels,
    success_rate,
    tasks_solved,
)
from metacog_fast.metrics.plots import plot_rates_with_intervals, plot_task_bars, plot_type2_roc, plot_type2_roc_curves
from metacog_fast.metrics.type2 import auroc2, average_ranks, metacognitive_accuracy, type2_roc

__all__ = [
    "AssessorReport",
    "Calibration",
    "PairedAuroc2",
    "PredictorResult",
    "TrivialPredictions",
    "calibration",
    "cross_fitted_trivial",
    "evaluate_assessor",
    "game_folds",
    "paired_auroc2_difference",
    "plot_reliability",
    "MIN_EPISODES",
    "Auroc2ByType",
    "Auroc2Result",
    "PairedDifference",
    "RateInterval",
    "accuracy_clustered",
    "auroc2_clustered",
    "claims_markdown",
    "evaluate_claim",
    "evaluate_claims",
    "parse_claim",
    "auroc2_within_types",
    "compare_paired",
    "comparisons_markdown",
    "format_p",
    "mean_interval",
    "p_cell",
    "pairwise_comparisons",
    "plot_rates_with_intervals",
    "success_interval",
    "auroc2",
    "mcnemar_exact",
    "paired_bootstrap",
    "rate_with_interval",
    "wilson_interval",
    "average_ranks",
    "mean_steps_charged",
    "mean_steps_to_success",
    "metacognitive_accuracy",
    "plot_task_bars",
    "plot_type2_roc",
    "plot_type2_roc_curves",
    "quantile_labels",
    "success_rate",
    "tasks_solved",
    "type2_roc",
]
