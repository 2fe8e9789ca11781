"""An assessor (a self-assessment signal such as M_sa or MUSE-WM's psi) measured against trivial
predictors of the same outcome, on held-out games.

A confidence signal scored on many rows (chunks, steps) per episode can reach a high AUROC2 by
knowing only what any bystander knows: late rows belong to long episodes, which mostly fail; some
task types are hard; a game whose adaptation episodes were lost is likely lost again. The assessor
counts only where it beats the best such predictor. :func:`evaluate_assessor` computes, for the
assessor(s) and for every trivial predictor:

* **AUROC2** with its cluster-bootstrap interval over episodes and the distinct successful /
  failed episodes (:func:`metacog_fast.metrics.auroc2_clustered`; undefined below 5 of either);
* **AUROC2 by position bucket**: the same within rows whose position falls in a bucket (with
  every bucket holding one position, position itself carries nothing there);
* **calibration**: ECE over ``bins`` equal-width probability bins,
  ECE = sum_b (n_b / N) |mean p_b - mean y_b|, with a cluster-bootstrap interval, and the
  reliability-diagram data (per bin: rows, episodes, mean predicted, observed rate);
* the **paired difference** AUROC2(assessor) - AUROC2(best trivial predictor) over the same rows,
  with a cluster-bootstrap interval resampling *games* (``games``; episodes when not given): both
  AUROC2s are recomputed on every resample from the same draw. **Verdict**: ``"beats"`` only when
  the interval lies above 0; ``"worse"`` when it lies below 0; ``"not shown"`` otherwise;
  ``"undefined"`` when either AUROC2 is undefined. The same within each position bucket, against
  the trivial predictor that is best in that bucket (``comparisons_by_position``).

Trivial predictors (never given the assessor's score):

* each numeric **signal** (e.g. position in the episode, the actor's token log-probability, the
  game's adaptation-episode win rate: anything known when the row is scored);
* each **prior**: a categorical key per row (e.g. task type) turned into the smoothed success rate
  of that key among episodes of *other* games, (wins + m * base) / (episodes + m) with m = 2
  pseudo-episodes at the base rate of those games; an episode counts once, with the mean outcome
  of its rows;
* **combination**: a logistic regression on all signals and priors together (features
  standardised, L2 penalty 1.0 on the weights, fitted by Newton's method).

Each trivial predictor is **cross-fitted by game folds**: games are dealt into ``folds`` folds
(within ``fold_strata``, e.g. task type, so each fold holds every stratum); for fold f, a logistic
regression (one input for a single signal or prior, all of them for the combination) is fitted on
the rows of the other folds and predicts fold f's rows. A prior's value, for every row the fold-f
model fits or predicts, is the rate over the games outside fold f (the training rows' own games
among them, as in any model fitted on those games); nothing about fold f's outcomes reaches fold
f's predictions, and every game is held out once. (A nested version that also left each training
row's own fold out of its prior was tried: leaving a game's own outcome out of its type's rate
makes the rate anti-correlated with that outcome, so the models learned a negative weight and the
held-out AUROC2 of the task-type prior on run 3's MUSE fell to 0.27.)

What is scored: the AUROC2 of a single signal or prior ranks its held-out value times the sign
of its weight in the held-out fold's model (a one-input logistic model adds nothing else to the
ranking, and leaving out the intercepts, which differ between folds, keeps a signal that is
constant within a position bucket at 0.5 there); the combination is ranked by its probability;
calibration is measured on the cross-fitted probabilities. The "best trivial predictor" is the
trivial predictor with the highest AUROC2 on these held-out predictions: choosing it after seeing
them favours the baseline, never the assessor.

Shapes: R rows; every per-row input is [R]; ``games`` and priors' keys are constant within an
episode.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from metacog_fast.metrics._checks import as_binary, as_vector, same_length
from metacog_fast.metrics.clustered import (
    MIN_EPISODES,
    Auroc2Result,
    _codes,
    _episode_kinds,
    _pair_matrix,
    auroc2_clustered,
    replicate_auroc2,
)
from metacog_fast.metrics.intervals import _z, bootstrap_p_value
from metacog_fast.metrics.resample import check_resamples, check_seed, stratified_counts

PRIOR_PSEUDO_EPISODES = 2.0
"""m of a prior's smoothing: (wins + m * base) / (episodes + m)."""
L2_PENALTY = 1.0
"""Ridge penalty on the standardised weights of the cross-fitted logistic regressions."""
COMBINATION = "combination"
"""Name of the logistic regression on all trivial signals and priors."""


@dataclass(frozen=True)
class Calibration:
    """ECE and reliability-diagram data of probabilities against binary outcomes."""

    ece: float
    """sum over bins of (rows in bin / rows) * |mean predicted - observed rate|."""
    low: float
    """Lower end of the cluster-bootstrap interval over episodes."""
    high: float
    """Upper end of the interval."""
    bins: int
    """Equal-width bins over [0, 1] (the last one closed)."""
    rows: int
    """Rows scored."""
    per_bin: list[dict[str, Any]]
    """One dict per bin: lo, hi, rows, episodes, mean_predicted, observed (None when empty)."""
    confidence: float = 0.95
    resamples: int = 0
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PredictorResult:
    """One predictor (the assessor or a trivial one) on the evaluated rows."""

    name: str
    kind: str
    """"assessor", "signal", "prior" or "combination"."""
    auroc2: Auroc2Result
    """AUROC2 over all rows with its cluster-bootstrap interval over episodes."""
    calibration: Calibration
    by_position: dict[str, Auroc2Result] = field(default_factory=dict)
    """Position bucket label -> AUROC2 within it (empty without positions)."""
    features: list[str] = field(default_factory=list)
    """Inputs of a cross-fitted trivial predictor (empty for an assessor)."""
    direction: int = 1
    """A signal or prior: +1 / -1 when every fold's model gave it this sign (its AUROC2 ranks its
    held-out value times its fold's sign), 0 when folds disagree; 0 for the combination (ranked by
    its probability); 1 for an assessor (its probability)."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "auroc2": self.auroc2.to_dict(),
                "calibration": self.calibration.to_dict(),
                "by_position": {k: v.to_dict() for k, v in self.by_position.items()}, "features": list(self.features),
                "direction": self.direction}


@dataclass(frozen=True)
class PairedAuroc2:
    """AUROC2(assessor) - AUROC2(baseline) over the same rows with a paired cluster bootstrap."""

    assessor: str
    baseline: str
    diff: float | None
    """Point difference (None when undefined)."""
    low: float | None
    high: float | None
    p_value: float | None
    """Two-sided bootstrap p of "no difference" (docs/statistics.md)."""
    clusters: str
    """What was resampled: "games" or "episodes"."""
    n_clusters: int
    verdict: str
    """"beats" (interval above 0), "worse" (below 0), "not shown", or "undefined"."""
    reason: str | None = None
    confidence: float = 0.95
    resamples: int = 0
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AssessorReport:
    """Everything :func:`evaluate_assessor` measured."""

    predictors: dict[str, PredictorResult]
    """Assessors first, then the trivial predictors, by name."""
    best_trivial: str | None
    """The trivial predictor with the highest defined AUROC2 (None when none is defined)."""
    comparisons: dict[str, PairedAuroc2]
    """Assessor name -> its paired difference against ``best_trivial``."""
    folds: int
    fold_of_game: dict[str, int]
    """Game id (str) -> its held-out fold."""
    position_buckets: list[str]
    bins: int
    rows: int
    notes: list[str] = field(default_factory=list)
    comparisons_by_position: dict[str, dict[str, PairedAuroc2]] = field(default_factory=dict)
    """Assessor name -> position bucket -> its paired difference, within the bucket's rows, against
    the trivial predictor with the best AUROC2 in that bucket."""

    def to_dict(self) -> dict[str, Any]:
        return {"predictors": {k: v.to_dict() for k, v in self.predictors.items()}, "best_trivial": self.best_trivial,
                "comparisons": {k: v.to_dict() for k, v in self.comparisons.items()},
                "comparisons_by_position": {k: {b: c.to_dict() for b, c in v.items()}
                                            for k, v in self.comparisons_by_position.items()},
                "folds": self.folds, "fold_of_game": dict(self.fold_of_game),
                "position_buckets": list(self.position_buckets), "bins": self.bins, "rows": self.rows,
                "notes": list(self.notes)}


# ------------------------------------------------------------------------------------ calibration

def calibration(probs: Any, outcome: Any, episodes: Sequence[Hashable], bins: int = 10, resamples: int = 10000,
                confidence: float = 0.95, seed: int = 0) -> Calibration:
    """ECE of ``probs`` [R] (in [0, 1]) against binary ``outcome`` [R] over ``bins`` equal-width bins,
    with a cluster-bootstrap interval over ``episodes`` [R] (stratified by episode kind, as AUROC2),
    and the reliability-diagram data."""
    p = as_vector(probs, "probs")
    y = as_binary(outcome, "outcome")
    same_length(p, y, "probs", "outcome")
    if (p < 0).any() or (p > 1).any():
        raise ValueError(f"probs: expected probabilities in [0, 1], got values in [{p.min():.3g}, {p.max():.3g}]")
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins: expected a positive int, got {bins!r}")
    ep, ep_ids = _codes(episodes, "episodes", p.size)
    B, sd = check_resamples(resamples), check_seed(seed)
    _z(confidence)
    nb, E = int(bins), len(ep_ids)
    b = np.minimum((p * nb).astype(np.int64), nb - 1)
    cell = ep * nb + b
    n_eb = np.bincount(cell, minlength=E * nb).reshape(E, nb)
    p_eb = np.bincount(cell, weights=p, minlength=E * nb).reshape(E, nb)
    y_eb = np.bincount(cell, weights=y.astype(np.float64), minlength=E * nb).reshape(E, nb)
    n_b, sp_b, sy_b = n_eb.sum(0), p_eb.sum(0), y_eb.sum(0)
    ece = float(np.abs(sp_b - sy_b).sum() / p.size)
    _, _, kind = _episode_kinds(y, ep, E)
    counts = stratified_counts(kind, B, sd)  # [B, E]
    reps = np.abs(counts @ p_eb - counts @ y_eb).sum(1) / (counts @ n_eb.astype(np.float64)).sum(1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
    per_bin = []
    for k in range(nb):
        n = int(n_b[k])
        per_bin.append({"lo": k / nb, "hi": (k + 1) / nb, "rows": n, "episodes": int((n_eb[:, k] > 0).sum()),
                        "mean_predicted": float(sp_b[k] / n) if n else None,
                        "observed": float(sy_b[k] / n) if n else None})
    return Calibration(ece, float(lo), float(hi), nb, int(p.size), per_bin, confidence, B, sd)


# -------------------------------------------------------------------------------- cross-fitting

def game_folds(games: Sequence[Hashable], folds: int = 5, strata: Sequence[Hashable] | None = None,
               seed: int = 0, *, strata_name: str = "strata") -> dict[Hashable, int]:
    """{game: fold in [0, folds)}: the distinct ``games`` (ids, repeats allowed, e.g. one per row)
    shuffled (``seed``) within each stratum (``strata``: one per entry of ``games``, constant for a
    game, e.g. its task type), then dealt round-robin, each stratum continuing where the last one
    stopped, so folds differ in size by at most one and a stratum with at least ``folds`` games is
    in every fold."""
    games = list(games)
    ids = list(dict.fromkeys(games))
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 2:
        raise ValueError(f"folds: expected an int >= 2, got {folds!r}")
    if len(ids) < folds:
        raise ValueError(f"folds: expected at most as many folds as games ({len(ids)}), got {folds}")
    if strata is None:
        st = [0] * len(ids)
    else:
        st = list(strata)
        if len(st) != len(games):
            raise ValueError(f"{strata_name}: expected one stratum per entry of games ({len(games)}), got {len(st)}")
        first: dict[Hashable, Hashable] = {}
        for g, s in zip(games, st):
            if first.setdefault(g, s) != s:
                raise ValueError(f"{strata_name}: game {g!r} has two strata ({first[g]!r}, {s!r})")
        st = [first[g] for g in ids]
    rng = np.random.default_rng(check_seed(seed))
    out: dict[Hashable, int] = {}
    k = 0
    for s in sorted(set(map(str, st))):
        members = [g for g, t in zip(ids, st) if str(t) == s]
        for i in rng.permutation(len(members)):
            out[members[i]] = k % folds
            k += 1
    return out


def _prior_table(key: np.ndarray, ep_y: np.ndarray, mask: np.ndarray, n_keys: int) -> np.ndarray:
    """[n_keys] smoothed success rate of each key among the episodes in ``mask`` [E] (key [E], mean
    outcome ep_y [E]); the base rate of those episodes for keys they do not hold."""
    if not mask.any():
        return np.full(n_keys, 0.5)
    base = float(ep_y[mask].mean())
    wins = np.bincount(key[mask], weights=ep_y[mask], minlength=n_keys)
    n = np.bincount(key[mask], minlength=n_keys).astype(np.float64)
    return (wins + PRIOR_PSEUDO_EPISODES * base) / (n + PRIOR_PSEUDO_EPISODES)


def _fit_logistic(X: np.ndarray, y: np.ndarray, l2: float = L2_PENALTY,
                  iters: int = 100) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights [k+1] with the intercept first, feature means [k], feature scales [k]) of an L2-penalised
    logistic regression of y [n] on X [n, k], features standardised (Newton's method)."""
    mu = X.mean(0)
    sc = X.std(0)
    sc = np.where(sc > 0, sc, 1.0)
    Z = np.c_[np.ones(len(X)), (X - mu) / sc]
    w = np.zeros(Z.shape[1])
    rate = float(np.clip(y.mean(), 1e-6, 1 - 1e-6))
    w[0] = np.log(rate / (1 - rate))
    pen = np.r_[0.0, np.full(Z.shape[1] - 1, l2)]
    for _ in range(iters):
        q = 1.0 / (1.0 + np.exp(-np.clip(Z @ w, -35, 35)))
        grad = Z.T @ (y - q) - pen * w
        H = (Z * (q * (1 - q))[:, None]).T @ Z + np.diag(pen) + 1e-9 * np.eye(Z.shape[1])
        step = np.linalg.solve(H, grad)
        w = w + step
        if np.max(np.abs(step)) < 1e-10:
            break
    return w, mu, sc


def _predict_logistic(model: tuple[np.ndarray, np.ndarray, np.ndarray], X: np.ndarray) -> np.ndarray:
    w, mu, sc = model
    z = w[0] + ((X - mu) / sc) @ w[1:]
    return 1.0 / (1.0 + np.exp(-np.clip(z, -35, 35)))


@dataclass(frozen=True)
class _Rows:
    """Checked inputs: outcome y [R], episode codes ep [R] (E ids), game codes gm [R] (G ids),
    game of each episode [E], signals {name: [R]}, priors {name: episode key codes [E]}."""

    y: np.ndarray
    ep: np.ndarray
    ep_ids: list[Hashable]
    gm: np.ndarray
    game_ids: list[Hashable]
    ep_game: np.ndarray
    signals: dict[str, np.ndarray]
    priors: dict[str, tuple[np.ndarray, int]]


def _per_episode(values: np.ndarray, ep: np.ndarray, E: int, name: str, ids: list[Hashable]) -> np.ndarray:
    """[E] the value each episode's rows share; ValueError naming ``name`` when they differ."""
    out = np.full(E, -1, dtype=np.int64)
    out[ep] = values
    if not np.array_equal(out[ep], values):
        bad = ids[int(ep[np.flatnonzero(out[ep] != values)[0]])]
        raise ValueError(f"{name}: expected one value per episode, episode {bad!r} has rows with two")
    return out


def _check_rows(outcome: Any, episodes: Sequence[Hashable], games: Sequence[Hashable] | None,
                signals: Mapping[str, Any] | None, priors: Mapping[str, Sequence[Hashable]] | None) -> _Rows:
    y = as_binary(outcome, "outcome")
    R = y.size
    ep, ep_ids = _codes(episodes, "episodes", R)
    gm, game_ids = _codes(episodes if games is None else games, "games", R)
    E = len(ep_ids)
    ep_game = _per_episode(gm, ep, E, "games", ep_ids)
    sig: dict[str, np.ndarray] = {}
    for name, v in (signals or {}).items():
        a = as_vector(v, f"signals[{name!r}]")
        same_length(y, a, "outcome", f"signals[{name!r}]")
        sig[str(name)] = a
    pri: dict[str, tuple[np.ndarray, int]] = {}
    for name, keys in (priors or {}).items():
        codes, kid = _codes(keys, f"priors[{name!r}]", R)
        pri[str(name)] = (_per_episode(codes, ep, E, f"priors[{name!r}]", ep_ids), len(kid))
    dup = set(sig) & set(pri)
    if dup or COMBINATION in sig or COMBINATION in pri:
        raise ValueError(f"signals, priors: names must be distinct and not {COMBINATION!r}, "
                         f"got {sorted(dup) or COMBINATION!r}")
    return _Rows(y, ep, ep_ids, gm, game_ids, ep_game, sig, pri)


def _fold_features(d: _Rows, fold_of_ep: np.ndarray, f: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(X [R, k] of every row for the model that predicts fold ``f``, train mask [R], column names).
    Signals are as given; a prior's column holds the rate computed from the episodes outside fold
    f, for every row (the held-out rows and the rows the model is fitted on)."""
    E = len(d.ep_ids)
    ep_y = np.bincount(d.ep, weights=d.y.astype(np.float64), minlength=E) / np.bincount(d.ep, minlength=E)
    cols, names = [], []
    for name, v in d.signals.items():
        cols.append(v)
        names.append(name)
    for name, (key, nk) in d.priors.items():
        table = _prior_table(key, ep_y, fold_of_ep != f, nk)
        cols.append(table[key[d.ep]])
        names.append(name)
    X = np.column_stack(cols) if cols else np.zeros((d.y.size, 0))
    return X, fold_of_ep[d.ep] != f, names


@dataclass(frozen=True)
class TrivialPredictions:
    """Held-out predictions of the trivial predictors (:func:`cross_fitted_trivial`)."""

    probs: dict[str, np.ndarray]
    """name -> [R] cross-fitted probability of success (what calibration is measured on)."""
    scores: dict[str, np.ndarray]
    """name -> [R] what the AUROC2 ranks: for one signal or prior, its held-out value times the sign
    of its weight in the held-out fold's model (the direction is all a one-input model adds to the
    ranking; the models' intercepts, which differ between folds, are left out); for the combination,
    the probability."""
    features: dict[str, list[str]]
    """name -> the signals / priors it is computed from."""
    direction: dict[str, int]
    """name -> +1 / -1 when every fold's model gives its weight that sign, 0 when the folds disagree
    (or for the combination)."""
    fold_of_game: dict[Hashable, int]
    """game id -> the fold in which it is held out."""


def cross_fitted_trivial(outcome: Any, episodes: Sequence[Hashable], games: Sequence[Hashable] | None = None,
                         signals: Mapping[str, Any] | None = None,
                         priors: Mapping[str, Sequence[Hashable]] | None = None, folds: int = 5,
                         fold_strata: Sequence[Hashable] | None = None, seed: int = 0) -> TrivialPredictions:
    """Held-out predictions of every trivial predictor (module docstring). Names: each signal, each
    prior, and ``"combination"`` when there are two or more inputs. outcome, episodes: [R];
    ``games`` [R] (default: the episodes) are the units of the folds; ``fold_strata`` [R] the
    stratum of each row's game; signals {name: [R] numbers}; priors {name: [R] keys}."""
    d = _check_rows(outcome, episodes, games, signals, priors)
    names_in = list(d.signals) + list(d.priors)
    if not names_in:
        raise ValueError("signals, priors: expected at least one trivial signal or prior, got none")
    if fold_strata is not None and len(list(fold_strata)) != d.y.size:
        raise ValueError(f"fold_strata: expected {d.y.size} values to match outcome, got {len(list(fold_strata))}")
    fold_of = game_folds([d.game_ids[g] for g in d.gm.tolist()], folds,
                         None if fold_strata is None else list(fold_strata), seed, strata_name="fold_strata")
    fold_of_ep = np.array([fold_of[d.game_ids[g]] for g in d.ep_game], dtype=np.int64)
    sets = {n: [n] for n in names_in}
    if len(names_in) >= 2:
        sets[COMBINATION] = names_in
    probs = {n: np.empty(d.y.size) for n in sets}
    scores = {n: np.empty(d.y.size) for n in names_in}  # a single input's held-out value x its fold's sign
    signs: dict[str, set[int]] = {n: set() for n in names_in}
    for f in range(int(folds)):
        X, train, cols = _fold_features(d, fold_of_ep, f)
        test = ~train
        ytr = d.y[train].astype(np.float64)
        for n, feats in sets.items():
            idx = [cols.index(c) for c in feats]
            if ytr.min() == ytr.max():  # one class in training: its rate, nothing to fit
                probs[n][test] = float(ytr.mean())
                if n in scores:
                    scores[n][test] = 0.0
                    signs[n].add(0)
                continue
            model = _fit_logistic(X[train][:, idx], ytr)
            probs[n][test] = _predict_logistic(model, X[test][:, idx])
            if n in scores:  # fold f's own sign: nothing learned from fold f's labels ranks its rows
                sign = int(np.sign(model[0][1]))
                scores[n][test] = sign * X[test][:, idx[0]]
                signs[n].add(sign)
    direction = {n: (next(iter(signs[n])) if len(signs[n]) == 1 else 0) if n in signs else 0 for n in sets}
    if COMBINATION in sets:
        scores[COMBINATION] = probs[COMBINATION]
    return TrivialPredictions(probs, scores, {n: list(v) for n, v in sets.items()}, direction, fold_of)


# ----------------------------------------------------------------------------------- evaluation

def position_buckets(position: Any, edges: Sequence[float]) -> tuple[np.ndarray, list[str]]:
    """([R] bucket index, labels) of ``position`` [R] cut at increasing ``edges``: bucket 0 is
    position < edges[0], bucket i is edges[i-1] <= position < edges[i], the last >= edges[-1]."""
    x = as_vector(position, "position")
    e = as_vector(edges, "position_edges")
    if np.any(np.diff(e) <= 0):
        raise ValueError(f"position_edges: expected increasing values, got {e.tolist()}")

    def fmt(v: float) -> str:
        return str(int(v)) if float(v).is_integer() else f"{v:g}"

    integer = bool(np.all(x == np.round(x)) and np.all(e == np.round(e)))
    labels = []
    bounds = [None, *e.tolist(), None]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if integer:
            if lo is None:
                labels.append("0" if hi == 1 and x.min() >= 0 else f"< {fmt(hi)}")
            elif hi is None:
                labels.append(f">= {fmt(lo)}")
            else:
                labels.append(fmt(lo) if hi - lo == 1 else f"{fmt(lo)}-{fmt(hi - 1)}")
        else:
            labels.append(f"< {fmt(hi)}" if lo is None else f">= {fmt(lo)}" if hi is None
                          else f"[{fmt(lo)}, {fmt(hi)})")
    return np.searchsorted(e, x, side="right"), labels


def paired_auroc2_difference(a: Any, b: Any, outcome: Any, clusters: Sequence[Hashable],
                             names: tuple[str, str] = ("a", "b"),
                             cluster_kind: str = "games", resamples: int = 10000, confidence: float = 0.95,
                             seed: int = 0) -> PairedAuroc2:
    """AUROC2(a) - AUROC2(b) of two signals [R] over the same rows, with a percentile interval from
    resampling ``clusters`` [R] with replacement (stratified by kind: only successful / only failed /
    both rows), both AUROC2s recomputed from the same draw; verdict as in the module docstring.
    Undefined when the outcome has a single class."""
    s1 = as_vector(a, "a")
    s2 = as_vector(b, "b")
    y = as_binary(outcome, "outcome")
    same_length(y, s1, "outcome", "a")
    same_length(y, s2, "outcome", "b")
    cl, ids = _codes(clusters, "clusters", y.size)
    B, sd = check_resamples(resamples), check_seed(seed)
    _z(confidence)
    C = len(ids)
    if y.min() == y.max():
        return PairedAuroc2(names[0], names[1], None, None, None, None, cluster_kind, C, "undefined",
                            "one outcome only", confidence, 0, sd)
    P, N = int(y.sum()), int(y.size - y.sum())
    K1 = _pair_matrix(s1, y, cl, C)[0].sum()
    K2 = _pair_matrix(s2, y, cl, C)[0].sum()
    diff = float((K1 - K2) / (P * N))
    _, _, kind = _episode_kinds(y, cl, C)
    counts = stratified_counts(kind, B, sd)
    reps = replicate_auroc2(s1, y, cl, counts) - replicate_auroc2(s2, y, cl, counts)
    reps = reps[np.isfinite(reps)]
    alpha = (1.0 - confidence) / 2.0
    lo, hi = (float(v) for v in np.quantile(reps, [alpha, 1.0 - alpha]))
    p = bootstrap_p_value(reps, reps)  # 1 when every replicate difference is 0
    verdict = "beats" if lo > 0 else "worse" if hi < 0 else "not shown"
    return PairedAuroc2(names[0], names[1], diff, lo, hi, p, cluster_kind, C, verdict, None, confidence, B, sd)


def evaluate_assessor(assessors: Mapping[str, Any], outcome: Any, episodes: Sequence[Hashable],
                      games: Sequence[Hashable] | None = None, signals: Mapping[str, Any] | None = None,
                      priors: Mapping[str, Sequence[Hashable]] | None = None, position: Any = None,
                      position_edges: Sequence[float] = (1, 2, 3, 5), folds: int = 5,
                      fold_strata: Sequence[Hashable] | None = None, bins: int = 10, resamples: int = 10000,
                      confidence: float = 0.95, seed: int = 0, min_episodes: int = MIN_EPISODES) -> AssessorReport:
    """Assessors against trivial predictors (module docstring).

    assessors: {name: [R] probabilities in [0, 1]} (e.g. M_sa adapted, M_sa pre-deployment);
    outcome: [R] binary label of each row; episodes: [R] episode id (the cluster of the AUROC2 and
    ECE intervals); games: [R] game id (the unit of the folds and of the paired difference; default
    the episodes); signals: {name: [R] numbers} known when the row is scored (higher need not mean
    success: the fitted weight sets the direction); priors: {name: [R] keys} turned into
    out-of-fold success rates; position: [R] numbers (e.g. chunk index) cut at ``position_edges``
    for the AUROC2 by position (None: no buckets); fold_strata: [R] stratum of each row's game."""
    if not isinstance(assessors, Mapping) or not assessors:
        raise ValueError(f"assessors: expected a non-empty mapping name -> probabilities, "
                         f"got {type(assessors).__name__}")
    d = _check_rows(outcome, episodes, games, signals, priors)
    probs = {}
    for name, v in assessors.items():
        a = as_vector(v, f"assessors[{name!r}]")
        same_length(d.y, a, "outcome", f"assessors[{name!r}]")
        if (a < 0).any() or (a > 1).any():
            raise ValueError(f"assessors[{name!r}]: expected probabilities in [0, 1]")
        probs[str(name)] = a
    clash = set(probs) & (set(d.signals) | set(d.priors) | {COMBINATION})
    if clash:
        raise ValueError(f"assessors: names must differ from the trivial predictors', got {sorted(clash)}")
    eps = list(episodes)
    gms = list(games) if games is not None else eps
    tp = cross_fitted_trivial(d.y, eps, gms, d.signals, {k: list(v) for k, v in (priors or {}).items()},
                              folds, fold_strata, seed)
    if position is not None:
        pb, labels = position_buckets(position, position_edges)
        same_length(d.y, pb.astype(np.float64), "outcome", "position")
    else:
        pb, labels = None, []
    kw = dict(resamples=resamples, confidence=confidence, seed=seed)

    def measure(name: str, kind: str, score: np.ndarray, prob: np.ndarray, features: list[str],
                direction: int) -> PredictorResult:
        res = auroc2_clustered(score, d.y, eps, min_episodes=min_episodes, **kw)
        cal = calibration(prob, d.y, eps, bins, **kw)
        by_pos = {}
        if pb is not None:
            for i, lab in enumerate(labels):
                m = pb == i
                if m.any():
                    by_pos[lab] = auroc2_clustered(score[m], d.y[m], [eps[j] for j in np.flatnonzero(m)],
                                                   min_episodes=min_episodes, **kw)
        return PredictorResult(name, kind, res, cal, by_pos, features, direction)

    out: dict[str, PredictorResult] = {}
    for name, p in probs.items():
        out[name] = measure(name, "assessor", p, p, [], 1)
    for name in tp.probs:
        kind = COMBINATION if name == COMBINATION else "prior" if name in d.priors else "signal"
        out[name] = measure(name, kind, tp.scores[name], tp.probs[name], tp.features[name], tp.direction[name])
    kind = "games" if games is not None else "episodes"

    def compare(name: str, m: np.ndarray | None, res: dict[str, Auroc2Result]) -> PairedAuroc2:
        """``name`` against the trivial predictor with the best AUROC2 in ``res`` (rows ``m``; all: None)."""
        ok = [n for n in tp.probs if res[n].defined]
        top = max(ok, key=lambda n: res[n].value) if ok else None
        if top is None or not res[name].defined:
            why = "no trivial predictor has a defined AUROC2" if top is None else f"{name}: {res[name].reason}"
            return PairedAuroc2(name, top or "", None, None, None, None, kind, len(d.game_ids), "undefined", why,
                                confidence, 0, seed)
        if m is None:
            return paired_auroc2_difference(probs[name], tp.scores[top], d.y, gms, (name, top), kind, **kw)
        idx = np.flatnonzero(m)
        return paired_auroc2_difference(probs[name][m], tp.scores[top][m], d.y[m], [gms[j] for j in idx], (name, top),
                                        kind, **kw)

    overall = {n: r.auroc2 for n, r in out.items()}
    best = max((n for n in tp.probs if overall[n].defined), key=lambda n: overall[n].value, default=None)
    comps = {name: compare(name, None, overall) for name in probs}
    comps_pos: dict[str, dict[str, PairedAuroc2]] = {name: {} for name in probs}
    if pb is not None:
        for i, lab in enumerate(labels):
            m = pb == i
            if not m.any():
                continue
            res = {n: r.by_position[lab] for n, r in out.items()}
            for name in probs:
                comps_pos[name][lab] = compare(name, m, res)
    notes = [f"trivial predictors cross-fitted over {folds} folds of games; the best trivial predictor is the one "
             "with the highest held-out AUROC2 (a choice that favours the baseline)"]
    mixed = [n for n, v in tp.direction.items() if v == 0 and n != COMBINATION]
    if mixed:
        notes.append(f"the sign of the weight differs between folds (each fold's rows ranked with its own): "
                     f"{', '.join(mixed)}")
    return AssessorReport(out, best, comps, int(folds), {str(k): v for k, v in tp.fold_of_game.items()}, labels,
                          int(bins), int(d.y.size), notes, comps_pos)


# ----------------------------------------------------------------------------------------- plot

def plot_reliability(calibrations: Mapping[str, Calibration | Mapping[str, Any]], path: Any,
                     title: str = "Reliability diagram") -> Any:
    """Reliability diagram: for each ``{name: Calibration (or its to_dict())}``, the observed success
    rate against the mean predicted probability of each non-empty bin (marker area ~ rows), the
    diagonal, and the ECE with its interval in the legend. PNG written atomically; returns the path."""
    from metacog_fast.metrics.plots import _figure, _save_atomic

    if not calibrations:
        raise ValueError("calibrations: expected at least one calibration, got an empty mapping")
    fig, ax = _figure()
    for name, cal in calibrations.items():
        c = cal.to_dict() if hasattr(cal, "to_dict") else dict(cal)
        try:
            full = [b for b in c["per_bin"] if b["rows"]]
            ece, lo, hi = float(c["ece"]), float(c["low"]), float(c["high"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"calibrations[{name!r}]: expected per_bin, ece, low, high ({exc})") from None
        x = [b["mean_predicted"] for b in full]
        y = [b["observed"] for b in full]
        n = np.array([b["rows"] for b in full], dtype=np.float64)
        line = ax.plot(x, y, lw=1.5, label=f"{name}: ECE {ece:.3f} [{lo:.3f}, {hi:.3f}]")[0]
        ax.scatter(x, y, s=10 + 190 * n / max(1.0, n.max()), color=line.get_color(), alpha=0.6)
    ax.plot([0, 1], [0, 1], ls="--", c="grey", lw=1, label="perfect calibration")
    ax.set_xlabel("mean predicted probability of success (bin)")
    ax.set_ylabel("observed success rate (bin)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.01)
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=7)
    return _save_atomic(fig, path)
