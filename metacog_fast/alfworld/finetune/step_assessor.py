"""A step-level M_sa: the same scorer (MiniLM task and chunk embeddings, the fused head) trained to
say whether a candidate action is the one ALFWorld's hand-coded expert would take (issue 49 item 2).

Training data, on ``train`` games only:

* DAgger collections (:mod:`metacog_fast.alfworld.finetune.dagger`): at each labelled state the
  actor's proposal is a positive when it is the expert's command, else a negative, and the expert's
  command a positive;
* step-label collections (:mod:`metacog_fast.alfworld.finetune.step_labels`) on ``train``: every
  sampled candidate with its label, and the expert's command when no candidate was it.

An example's chunk has the scorer's form: the last ``chunk_size - 1`` executed (action, observation)
pairs (think lines left out), then ``(candidate, "")``; the plan is empty.

Evaluation, on step-label collections of other splits (``valid_seen`` to choose the selection
margin, ``valid_train`` to report), one row per distinct candidate of a labelled step:

* **the assessor against trivial predictors** (:func:`metacog_fast.metrics.assessor.evaluate_assessor`):
  AUROC2 of the label with intervals clustered by game, calibration, against the step's position,
  the actor's log-likelihood of the candidate, how many of the step's samples gave it, whether it is
  the greedy one, the task type's prior and their cross-fitted combination;
* **candidate ranking against the expert**: on steps with several candidates of which one is the
  expert's command, the share where each rule's pick is the expert's command: the greedy candidate,
  the highest log-likelihood, the most drawn, the assessor's highest score, and MUSE's rule (the
  greedy candidate unless another scores higher by ``margin``); Wilson intervals over steps and the
  pooled difference of each rule against the greedy one with a cluster bootstrap over games;
* the same rule over **all** labelled steps (a step with no expert candidate counts as a miss for
  every rule), which is what an agent's next action would gain.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from metacog_fast._atomic import atomic_write_bytes


@dataclass
class StepAssessorConfig:
    """How the step assessor is trained and measured."""

    chunk_size: int = 4
    """Pairs per chunk: ``chunk_size - 1`` executed ones and the candidate."""
    epochs: int = 5
    """Passes over the training examples."""
    folds: int = 5
    """Game folds of the trivial predictors' cross-fitting."""
    margins: tuple[float, ...] = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
    """Selection margins tried on the tuning collection (the best one is applied to the report)."""
    resamples: int = 10000
    """Bootstrap resamples of every interval."""
    seed: int = 0
    """Seed of the head, the minibatch order, the folds and the bootstraps."""


def _task_of_intro(intro: str) -> str:
    i = intro.find("Your task is to:")
    if i < 0:
        raise ValueError(f"intro: no 'Your task is to:' line in {intro[:80]!r}...")
    return intro[i:].strip()


def _executed(pairs: Sequence[Sequence[str]]) -> list[tuple[str, str]]:
    """The executed (action, observation) pairs of a transcript, think lines left out."""
    return [(str(a), str(o)) for a, o in pairs if not str(a).lower().startswith("think:")]


def _chunk(history: Sequence[tuple[str, str]], candidate: str, size: int) -> list[tuple[str, str]]:
    keep = size - 1
    return (list(history[-keep:]) if keep else []) + [(candidate, "")]


def dagger_examples(records: Sequence[dict[str, Any]], size: int = 4) -> list[dict[str, Any]]:
    """Training examples of DAgger game records (``games/*.json`` of a DAgger collection)."""
    out: list[dict[str, Any]] = []
    for r in records:
        if r.get("split") not in (None, "train"):
            raise ValueError(f"records: {r.get('id')} is from split {r.get('split')!r}; train the assessor on train")
        task = _task_of_intro(r["intro"])
        hist = _executed(r["pairs"])
        for t, s in enumerate(r["steps"]):
            if s["label"] is None:
                continue
            h = hist[:t]
            out.append({"task": task, "plan": "", "chunk": _chunk(h, s["proposed"], size),
                        "label": float(s["proposed"] == s["label"]), "game": r["id"]})
            if s["proposed"] != s["label"]:
                out.append({"task": task, "plan": "", "chunk": _chunk(h, s["label"], size), "label": 1.0,
                            "game": r["id"]})
    return out


def step_label_examples(records: Sequence[dict[str, Any]], size: int = 4,
                        with_expert: bool = True) -> list[dict[str, Any]]:
    """Examples of step-label game records: every candidate of a labelled step (``with_expert``:
    and the expert's command where no candidate was it). Each carries the row's fields for the
    evaluation (game, task type, step, candidate index, log-likelihood, draws)."""
    out: list[dict[str, Any]] = []
    for r in records:
        hist = _executed(r["pairs"])
        for s in r["steps"]:
            if s["label"] is None:
                continue
            t = int(s["t"])
            h = hist[:t]
            for i, c in enumerate(s["candidates"]):
                out.append({"task": r["task"], "plan": "", "chunk": _chunk(h, c["action"], size),
                            "label": float(c["label"]), "game": r["game"], "task_type": r["task_type"], "t": t,
                            "index": i, "loglik": float(c["loglik"]), "draws": int(c["draws"])})
            if with_expert and not any(c["label"] for c in s["candidates"]):
                out.append({"task": r["task"], "plan": "", "chunk": _chunk(h, s["label"], size), "label": 1.0,
                            "game": r["game"], "task_type": r["task_type"], "t": t, "index": -1,
                            "loglik": float(s["label_loglik"]), "draws": 0})
    return out


def train_step_assessor(examples: Sequence[dict[str, Any]], cfg: StepAssessorConfig, encoder: Any = None) -> Any:
    """A :class:`~metacog_fast.scoring.TrajectoryScorer` fitted on ``examples``."""
    from metacog_fast.scoring import ScorerConfig, TrajectoryScorer

    if not examples:
        raise ValueError("examples: no training example")
    ys = {float(e["label"]) for e in examples}
    if ys != {0.0, 1.0}:
        raise ValueError(f"examples: expected both labels, got only {sorted(ys)}")
    scorer = TrajectoryScorer(ScorerConfig(epochs=cfg.epochs, chunk_size=cfg.chunk_size, seed=cfg.seed), encoder=encoder)
    scorer.fit(list(examples))
    return scorer


# ------------------------------------------------------------------------------------ ranking

RULES = ("greedy", "loglik", "draws", "assessor", "assessor_margin", "combined")
"""``combined``: the highest cross-fitted probability of the step M_sa's score together with the
actor's own signals (:func:`with_actor_signals`)."""


def _steps(rows: Sequence[dict[str, Any]], scores: np.ndarray) -> list[dict[str, Any]]:
    """Rows (candidates, index >= 0) grouped per step, in order."""
    steps: dict[tuple[str, int], dict[str, Any]] = {}
    for r, sc in zip(rows, scores):
        if r["index"] < 0:
            continue
        st = steps.setdefault((r["game"], r["t"]), {"game": r["game"], "label": [], "loglik": [], "draws": [],
                                                    "score": [], "combined": []})
        st["label"].append(int(r["label"]))
        st["loglik"].append(r["loglik"])
        st["draws"].append(r["draws"])
        st["score"].append(float(sc))
        st["combined"].append(float(r.get("combined", sc)))
    return list(steps.values())


def pick(step: dict[str, Any], rule: str, margin: float = 0.0) -> int:
    """The candidate index a rule picks (ties to the lowest index, i.e. towards the greedy one)."""
    if rule == "greedy":
        return 0
    if rule in ("loglik", "draws", "assessor", "combined"):
        key = {"loglik": "loglik", "draws": "draws", "assessor": "score", "combined": "combined"}[rule]
        return int(np.argmax(step[key]))
    if rule == "assessor_margin":
        s = np.asarray(step["score"])
        if len(s) < 2:
            return 0
        j = 1 + int(np.argmax(s[1:]))
        return j if s[j] - s[0] > 0.0 and s[j] - s[0] >= margin else 0
    raise ValueError(f"rule: expected one of {RULES}, got {rule!r}")


def ranking(rows: Sequence[dict[str, Any]], scores: np.ndarray, margin: float, resamples: int = 10000,
            seed: int = 0) -> dict[str, Any]:
    """Top-1 agreement with the expert of each rule (module docstring), on the steps where it can
    differ (several candidates, one of them the expert's) and on all labelled steps."""
    from metacog_fast.metrics import rate_with_interval

    steps = _steps(rows, scores)
    out: dict[str, Any] = {"margin": margin, "labelled_steps": len(steps)}
    for subset, keep in (("contested", lambda s: len(s["label"]) > 1 and any(s["label"])), ("all", lambda s: True)):
        sel = [s for s in steps if keep(s)]
        res: dict[str, Any] = {"steps": len(sel), "games": len({s["game"] for s in sel})}
        if not sel:
            out[subset] = res
            continue
        hits = {rule: np.asarray([s["label"][pick(s, rule, margin)] for s in sel], np.float64) for rule in RULES}
        games = [s["game"] for s in sel]
        for rule in RULES:
            res[rule] = rate_with_interval(hits[rule])
        res["random"] = float(np.mean([np.mean(s["label"]) for s in sel]))
        res["versus_greedy"] = {rule: _pooled_difference(hits[rule], hits["greedy"], games, resamples, seed)
                                for rule in RULES if rule != "greedy"}
        out[subset] = res
    return out


def _pooled_difference(a: np.ndarray, b: np.ndarray, games: Sequence[str], resamples: int,
                         seed: int) -> dict[str, Any]:
    """The pooled difference mean(a - b) over steps (the unit of the agreement column) with a
    cluster-bootstrap interval that resamples games (steps of a game are not independent) and the
    bootstrap's two-sided p of "no difference": {"diff", "low", "high", "p_value", "games", "steps"}."""
    from metacog_fast.metrics.intervals import bootstrap_p_value
    from metacog_fast.metrics.resample import check_resamples, check_seed, unit_indices

    ids = sorted(set(games))
    g = np.asarray([ids.index(x) for x in games])
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    S = np.bincount(g, weights=d, minlength=len(ids))
    N = np.bincount(g, minlength=len(ids)).astype(np.float64)
    idx = unit_indices(len(ids), check_resamples(resamples), check_seed(seed))
    counts = np.stack([np.bincount(row, minlength=len(ids)) for row in idx])
    means = (counts @ S) / (counts @ N)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return {"diff": float(d.mean()), "low": float(lo), "high": float(hi), "p_value": bootstrap_p_value(means, d),
            "games": len(ids), "steps": int(d.size)}


def choose_margin(rows: Sequence[dict[str, Any]], scores: np.ndarray, margins: Sequence[float]) -> tuple[float, dict]:
    """The margin whose MUSE rule agrees with the expert most often on all labelled steps of the
    tuning rows (ties: the larger margin, i.e. closer to the greedy action)."""
    steps = _steps(rows, scores)
    if not steps:
        raise ValueError("rows: no labelled step to choose a margin on")
    acc = {float(m): float(np.mean([s["label"][pick(s, "assessor_margin", m)] for s in steps])) for m in margins}
    best = max(acc, key=lambda m: (acc[m], m))
    return best, acc


# ------------------------------------------------------------------------------------ the run

def load_records(folders: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Game records (``games/*.json``) of DAgger or step-label collection folders, in a stable order."""
    out: list[dict[str, Any]] = []
    for d in folders:
        files = sorted((Path(d) / "games").glob("*.json"))
        if not files:
            raise ValueError(f"folders: {d} holds no game records (expected games/*.json)")
        out += [json.loads(f.read_text()) for f in files]
    return out


def _is_step_label(r: dict[str, Any]) -> bool:
    return bool(r["steps"]) and "candidates" in r["steps"][0]


def training_examples(records: Sequence[dict[str, Any]], size: int) -> list[dict[str, Any]]:
    """Examples of DAgger and ``train`` step-label records together."""
    dag = [r for r in records if not _is_step_label(r)]
    lab = [r for r in records if _is_step_label(r)]
    bad = sorted({r["split"] for r in lab if r["split"] != "train"})
    if bad:
        raise ValueError(f"train: step-label collections of split(s) {bad}; the assessor trains on train games only")
    return dagger_examples(dag, size) + step_label_examples(lab, size, with_expert=True)


def _rows(records: Sequence[dict[str, Any]], size: int, what: str) -> list[dict[str, Any]]:
    if not records or not all(_is_step_label(r) for r in records if r["steps"]):
        raise ValueError(f"{what}: expected step-label collections (metacog finetune step-labels)")
    return step_label_examples(records, size, with_expert=False)


def with_actor_signals(score: np.ndarray, rows: Sequence[dict[str, Any]], folds: int, seed: int) -> np.ndarray:
    """[R] held-out probabilities of a logistic regression on the step M_sa's logit and the actor's
    signals (log-likelihood, draws, greedy, position), cross-fitted over the same game folds as the
    trivial predictors (stratified by task type): what the assessor adds to what the actor knows."""
    from metacog_fast.metrics.assessor import _fit_logistic, _predict_logistic, game_folds

    y = np.asarray([r["label"] for r in rows], np.float64)
    games = [r["game"] for r in rows]
    fold_of = game_folds(games, folds, [r["task_type"] for r in rows], seed, strata_name="task types")
    f = np.asarray([fold_of[g] for g in games])
    p = np.clip(np.asarray(score, np.float64), 1e-6, 1 - 1e-6)
    X = np.c_[np.log(p / (1 - p)), [r["loglik"] for r in rows], [r["draws"] for r in rows],
              [float(r["index"] == 0) for r in rows], [r["t"] for r in rows]]
    out = np.empty(len(rows))
    for k in range(folds):
        tr = f != k
        if not (~tr).any():
            continue
        out[~tr] = (_predict_logistic(_fit_logistic(X[tr], y[tr]), X[~tr]) if 0 < y[tr].mean() < 1
                    else float(y[tr].mean()))
    return out


def _score_rows(scorer: Any, rows: Sequence[dict[str, Any]]) -> np.ndarray:
    task, traj, _ = scorer.embed_examples(rows)
    return scorer.score_embeddings(task, traj)


def run_step_assessor(train: Sequence[str | Path], tune: Sequence[str | Path], report: Sequence[str | Path],
                      out: str | Path, cfg: StepAssessorConfig | None = None,
                      episode_scorer: str | Path | None = None, encoder: Any = None) -> dict[str, Any]:
    """Train the step assessor on ``train`` folders, choose the margin on ``tune``, measure on
    ``report`` (module docstring). ``episode_scorer``: a scorer folder trained on episode outcomes
    (the paper's labels), measured on the same rows beside it. ``encoder``: the MiniLM encoder to
    use (default: a new one). Writes ``out/step_assessor.json``,
    ``out/summary.md``, ``out/reliability.png`` and the trained scorer in ``out/scorer``."""
    from metacog_fast.metrics.assessor import evaluate_assessor, plot_reliability
    from metacog_fast.scoring import TrajectoryScorer

    cfg = cfg or StepAssessorConfig()
    size = cfg.chunk_size
    train_recs = load_records(train)
    tune_rows = _rows(load_records(tune), size, "tune")
    report_recs = load_records(report)
    report_rows = _rows(report_recs, size, "report")
    games_train = {r.get("id") or r.get("game") for r in train_recs}
    games_train = {str(g).rsplit("/", 1)[-1] for g in games_train}
    leak = games_train & {r["game"] for r in report_recs}
    if leak:
        raise ValueError(f"report: {len(leak)} game(s) also in the training folders, e.g. {sorted(leak)[0]}")
    examples = training_examples(train_recs, size)
    scorer = train_step_assessor(examples, cfg, encoder=encoder)
    scorer.save(Path(out) / "scorer", include_replay=False)
    tune_scores = _score_rows(scorer, tune_rows)
    margin, margin_acc = choose_margin(tune_rows, tune_scores, cfg.margins)
    scores = _score_rows(scorer, report_rows)
    combined = with_actor_signals(scores, report_rows, cfg.folds, cfg.seed)
    for r, c in zip(report_rows, combined):
        r["combined"] = float(c)
    assessors = {"step M_sa": scores, "step M_sa + actor signals": combined}
    if episode_scorer is not None:
        ep = TrajectoryScorer.load(episode_scorer, encoder=scorer.encoder)
        assessors["episode M_sa"] = _score_rows(ep, report_rows)
    y = np.asarray([r["label"] for r in report_rows])
    games = [r["game"] for r in report_rows]
    rep = evaluate_assessor(
        assessors, y, games, games,
        signals={"position": [r["t"] for r in report_rows], "actor loglik": [r["loglik"] for r in report_rows],
                 "draws": [r["draws"] for r in report_rows], "greedy": [float(r["index"] == 0) for r in report_rows]},
        priors={"task type": [r["task_type"] for r in report_rows]}, position=[r["t"] for r in report_rows],
        position_edges=(5, 10, 20), folds=cfg.folds, fold_strata=[r["task_type"] for r in report_rows],
        resamples=cfg.resamples, seed=cfg.seed)
    result = {
        "config": asdict(cfg), "train_folders": [str(p) for p in train], "tune_folders": [str(p) for p in tune],
        "report_folders": [str(p) for p in report], "episode_scorer": None if episode_scorer is None else str(episode_scorer),
        "train_examples": len(examples), "train_positives": int(sum(e["label"] for e in examples)),
        "train_games": len(games_train),
        "margin": margin, "margin_accuracy_on_tune": margin_acc,
        "ranking_tune": ranking(tune_rows, tune_scores, margin, cfg.resamples, cfg.seed),
        "ranking": ranking(report_rows, scores, margin, cfg.resamples, cfg.seed),
        "assessor": rep.to_dict(),
    }
    if "episode M_sa" in assessors:
        result["ranking_episode_msa"] = ranking(report_rows, assessors["episode M_sa"], margin, cfg.resamples, cfg.seed)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(root / "step_assessor.json", json.dumps(result, indent=1).encode())
    atomic_write_bytes(root / "summary.md", summary_markdown(result).encode())
    plot_reliability({n: p.calibration for n, p in rep.predictors.items()}, root / "reliability.png",
                     title="Step labels on held-out games: reliability")
    return result


def _rate(r: dict[str, Any] | None) -> str:
    if not r:
        return "-"
    return f"{100 * r['rate']:.1f} % [{100 * r['low']:.1f}, {100 * r['high']:.1f}] ({r['successes']}/{r['n']})"


def _diff(d: dict[str, Any]) -> str:
    if not d.get("defined", True) or d.get("diff") is None:
        return "undefined"
    return f"{100 * d['diff']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}], p = {d['p_value']:.3g}"


def summary_markdown(result: dict[str, Any]) -> str:
    """The run's tables in Markdown."""
    lines = ["# Step-level self-assessment against the hand-coded expert", "",
             f"Trained on {result['train_examples']} examples ({result['train_positives']} positive) of "
             f"{result['train_games']} train games; margin {result['margin']} chosen on the tuning folders "
             f"({', '.join(result['tune_folders'])}); measured on {', '.join(result['report_folders'])}.", ""]
    for key, title in (("ranking", "step M_sa"), ("ranking_episode_msa", "episode M_sa (the paper's labels)")):
        rk = result.get(key)
        if not rk:
            continue
        for subset in ("contested", "all"):
            res = rk[subset]
            if not res.get("steps"):
                continue
            lines += [f"## Candidate picked = the expert's command, {title}, {subset} steps "
                      f"({res['steps']} steps, {res['games']} games; random pick {100 * res['random']:.1f} %)", "",
                      "| rule | agreement (Wilson 95 %) | rule − greedy, points [95 %, games resampled] |", "|---|---|---|"]
            for rule in RULES:
                vs = "—" if rule == "greedy" else _diff(res["versus_greedy"][rule])
                lines.append(f"| {rule} | {_rate(res[rule])} | {vs} |")
            lines.append("")
    a = result["assessor"]
    lines += ["## AUROC2 of the step label (rows = candidates; clusters = games)", "",
              "| predictor | kind | AUROC2 [95 %] | positive / negative games | ECE |", "|---|---|---|---|---|"]
    for name, p in a["predictors"].items():
        au = p["auroc2"]
        v = "undefined" if au.get("value") is None else f"{au['value']:.3f} [{au['low']:.3f}, {au['high']:.3f}]"
        ece = p["calibration"]["ece"]
        lines.append(f"| {name} | {p['kind']} | {v} | {au['positives']} / {au['negatives']} | "
                     f"{'-' if ece is None else f'{ece:.3f}'} |")
    lines += ["", f"Best trivial predictor: {a['best_trivial']}.", ""]
    for name, c in a["comparisons"].items():
        d = c.get("diff")
        txt = "undefined" if d is None else f"{d:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}], p = {c['p_value']:.3g}"
        lines.append(f"- {name} − {c.get('baseline')}: {txt} → **{c.get('verdict')}**")
    return "\n".join(lines) + "\n"


__all__ = ["RULES", "StepAssessorConfig", "choose_margin", "dagger_examples", "load_records", "pick", "ranking",
           "run_step_assessor", "step_label_examples", "summary_markdown", "train_step_assessor", "training_examples"]
