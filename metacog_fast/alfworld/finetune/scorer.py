"""The self-assessment scorer M_sa of the fine-tuned actor, from that actor's own recorded episodes
(MUSE Algorithm 3's pre-deployment: chunks of an episode are labelled with its outcome).

Input: the episode records an evaluation writes (``<eval dir>/run/episodes/<game>/<phase>_<k>.json``,
each with ``game``, ``task``, ``task_type``, ``plan``, ``pairs`` and ``won``). Output: a scorer
folder (:meth:`TrajectoryScorer.save`, without its replay) and ``scorer.json`` with what it was
trained on and how well it separates success from failure on **games it never saw**: a k-fold
cross-validation split by game (every episode of a game in one fold), AUROC2 of the held-out chunks'
scores against their episode's outcome with a cluster bootstrap over episodes, and the same per
episode (mean chunk score). Below five distinct successful (or failed) held-out episodes the figure
is undefined and the record says so (:mod:`metacog_fast.metrics.clustered`).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

from metacog_fast._atomic import atomic_write_bytes


@dataclass
class ScorerFitConfig:
    """How the scorer is fitted and checked."""

    chunk_size: int = 4
    """(action, observation) pairs per chunk (the paper's 4)."""
    epochs: int = 5
    """Passes over the training chunks (measured by the cross-validation on the shipped actor's
    episodes: chunk AUROC2 0.695 at 5 epochs, 0.676 at 15; the head overfits beyond)."""
    shape: Literal["rollout", "episode"] = "rollout"
    """``"rollout"``: chunks shaped like the ones MUSE scores at deployment, one per step t: the
    ``chunk_size - rollout_pairs`` real pairs before t, then the next ``rollout_pairs`` actions with
    their observations blanked (the shipped actor is trained on actions only, so its rollouts are
    action sequences; a scorer trained on real observations scored every such rollout below 1e-4).
    ``"episode"``: the paper's non-overlapping chunks of real pairs."""
    rollout_pairs: int = 3
    """Imagined pairs per rollout (AgentConfig.rollout_pairs)."""
    folds: int = 5
    """Cross-validation folds, split by game."""
    resamples: int = 10000
    """Bootstrap resamples of the AUROC2 intervals."""
    seed: int = 0
    """Seed of the head, the minibatch order, the fold assignment and the bootstrap."""


def load_episodes(dirs: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Episode records under each of ``dirs`` (an evaluation folder, its ``run`` folder or an
    ``episodes`` folder), in a stable order; each gains ``source`` (the folder it came from)."""
    out: list[dict[str, Any]] = []
    for d in dirs:
        root = Path(d)
        for cand in (root / "run" / "episodes", root / "episodes", root):
            files = sorted(cand.glob("*/*.json")) if cand.is_dir() else []
            if files:
                break
        if not files:
            raise FileNotFoundError(f"dirs: {root} holds no episode records (expected run/episodes/<game>/*.json)")
        for f in files:
            rec = json.loads(f.read_text())
            missing = [k for k in ("game", "task", "pairs", "won") if k not in rec]
            if missing:
                raise ValueError(f"dirs: {f} is not an episode record (missing {missing})")
            rec["source"] = str(root)
            out.append(rec)
    return out


def _fold_of(game: str, folds: int, seed: int) -> int:
    h = hashlib.sha256(f"{seed}:{game}".encode()).digest()
    return int.from_bytes(h[:8], "little") % folds


def _chunks(pairs: list[tuple[str, str]], cfg: ScorerFitConfig) -> list[list[tuple[str, str]]]:
    from metacog_fast.scoring import chunk_episode

    if cfg.shape == "episode":
        return chunk_episode(pairs, cfg.chunk_size)
    if cfg.shape != "rollout":
        raise ValueError(f"shape: expected 'rollout' or 'episode', got {cfg.shape!r}")
    if not 1 <= cfg.rollout_pairs <= cfg.chunk_size:
        raise ValueError(f"rollout_pairs: expected 1..chunk_size ({cfg.chunk_size}), got {cfg.rollout_pairs}")
    keep = cfg.chunk_size - cfg.rollout_pairs
    return [pairs[max(0, t - keep):t] + [(a, "") for a, _ in pairs[t:t + cfg.rollout_pairs]]
            for t in range(len(pairs))]


def _examples(records: Sequence[dict[str, Any]], cfg: ScorerFitConfig) -> tuple[list[dict[str, Any]], list[int]]:
    """(chunk examples, index of each one's record)."""
    ex, owner = [], []
    for i, r in enumerate(records):
        for c in _chunks([(str(a), str(o)) for a, o in r["pairs"]], cfg):
            ex.append({"task": r["task"], "plan": r.get("plan", ""), "chunk": c, "label": float(bool(r["won"]))})
            owner.append(i)
    return ex, owner


def _new_scorer(cfg: ScorerFitConfig, encoder: Any = None) -> Any:
    from metacog_fast.scoring import ScorerConfig, TrajectoryScorer

    return TrajectoryScorer(ScorerConfig(epochs=cfg.epochs, chunk_size=cfg.chunk_size, seed=cfg.seed), encoder=encoder)


def crossval(records: Sequence[dict[str, Any]], cfg: ScorerFitConfig, embedded: tuple | None = None,
             encoder: Any = None) -> dict[str, Any]:
    """Held-out scores of every chunk, split by game into ``cfg.folds`` folds, and their AUROC2s.
    ``embedded``: the chunks' ``embed_examples`` output if the caller has it (with its ``encoder``)."""
    from metacog_fast.metrics.clustered import auroc2_clustered, auroc2_within_types
    from metacog_fast.metrics.type2 import metacognitive_accuracy

    if cfg.folds < 2:
        raise ValueError(f"folds: expected >= 2, got {cfg.folds}")
    ex, owner = _examples(records, cfg)
    if not ex:
        raise ValueError("records: no episode has any (action, observation) pair")
    owner_a = np.asarray(owner)
    fold = np.asarray([_fold_of(records[i]["game"], cfg.folds, cfg.seed) for i in owner])
    if embedded is None:
        probe = _new_scorer(cfg, encoder=encoder)
        encoder = probe.encoder
        embedded = probe.embed_examples(ex)
    task, traj, y = embedded  # embedded once; every fold's head trains on slices
    scores = np.full(len(ex), np.nan, np.float32)
    for f in range(cfg.folds):
        test = fold == f
        train = ~test
        if not test.any():
            continue
        if len(np.unique(y[train])) < 2:
            raise ValueError(f"records: fold {f}'s training games are all {'won' if y[train][0] else 'lost'}")
        s = _new_scorer(cfg, encoder=encoder)
        s.fit_embeddings(task[train], traj[train], y[train])
        scores[test] = s.score_embeddings(task[test], traj[test])
    eps = [f"{records[i]['source']}|{records[i]['game']}|{records[i].get('phase', '')}_{records[i].get('k', 0)}"
           for i in owner]
    types = [records[i].get("task_type", "unknown") for i in owner]
    chunk = auroc2_clustered(scores, y, eps, resamples=cfg.resamples, seed=cfg.seed)
    within = auroc2_within_types(scores, y, eps, types, resamples=cfg.resamples, seed=cfg.seed)
    # per episode: the mean score of its chunks against its outcome
    ep_ids = sorted(set(eps), key=eps.index)
    ep_score = np.asarray([scores[[e == x for x in eps]].mean() for e in ep_ids])
    ep_won = np.asarray([float(bool(records[int(owner_a[eps.index(e)])]["won"])) for e in ep_ids])
    episode = auroc2_clustered(ep_score, ep_won, ep_ids, resamples=cfg.resamples, seed=cfg.seed)
    # Episodes of one game (e.g. the same actor under two settings) are not independent: the same
    # AUROC2 with whole games resampled, and the counts then of distinct games.
    games = [records[i]["game"] for i in owner]
    by_game = auroc2_clustered(scores, y, games, resamples=cfg.resamples, seed=cfg.seed)
    return {
        "folds": cfg.folds,
        "chunks": len(ex),
        "episodes": len(ep_ids),
        "games": len({r["game"] for r in records}),
        "won_episodes": int(ep_won.sum()),
        "chunk_auroc2": chunk.to_dict(),
        "chunk_auroc2_text": chunk.text(3),
        "chunk_auroc2_within_types": within.to_dict(),
        "chunk_auroc2_games_resampled": by_game.to_dict(),
        "chunk_auroc2_games_resampled_text": by_game.text(3).replace(" ep)", " games)"),
        "episode_auroc2": episode.to_dict(),
        "episode_auroc2_text": episode.text(3),
        "chunk_metacognitive_accuracy": float(metacognitive_accuracy(scores, y)),
        "mean_score_won_chunks": float(scores[y == 1].mean()) if (y == 1).any() else None,
        "mean_score_lost_chunks": float(scores[y == 0].mean()) if (y == 0).any() else None,
    }


def fit_scorer(records: Sequence[dict[str, Any]], out: str | Path, cfg: ScorerFitConfig | None = None,
               check: bool = True) -> dict[str, Any]:
    """Fit the scorer on every chunk of ``records``, save it to ``out`` (no replay: small enough to
    ship) with ``scorer.json`` (training data, config, and the cross-validation when ``check``)."""
    cfg = cfg or ScorerFitConfig()
    if not records:
        raise ValueError("records: expected at least one episode record")
    ex, _ = _examples(records, cfg)
    labels = {e["label"] for e in ex}
    if labels != {0.0, 1.0}:
        raise ValueError(f"records: need won and lost episodes, got only {'won' if 1.0 in labels else 'lost'} ones")
    report: dict[str, Any] = {"config": asdict(cfg)}
    s = _new_scorer(cfg)
    embedded = s.embed_examples(ex)  # once, for the cross-validation and the final fit
    if check:
        report["crossval"] = crossval(records, cfg, embedded, s.encoder)
    losses = s.fit_embeddings(*embedded)
    folder = s.save(out, include_replay=False)
    games = sorted({r["game"] for r in records})
    report.update({
        "trained_on": {
            "sources": sorted({r["source"] for r in records}),
            "episodes": len(records),
            "won_episodes": int(sum(bool(r["won"]) for r in records)),
            "games": len(games),
            "games_sha256": hashlib.sha256("\n".join(games).encode()).hexdigest(),
            "chunks": len(ex),
            "positive_chunks": int(sum(e["label"] for e in ex)),
        },
        "final_train_loss": losses[-1] if losses else None,
    })
    atomic_write_bytes(Path(folder) / "scorer.json", json.dumps(report, indent=1).encode())
    return report
