"""Synthetic memory records for tests and benchmarks (one definition, used by both).

Two kinds of embedding data, both unit vectors of size ``dim``:

* ``"clustered"``: 1,000 Gaussian cluster centres; a record is a centre plus isotropic noise
  (cos to its centre ~0.7). Queries are noisy centres: a query has a few hundred close records
  (at 1M) and relevance separates them from the rest (``(cos + 1) / 2`` ~0.85 against ~0.5).
* ``"unstructured"``: i.i.d. uniform directions, queries too. Every cosine is ~N(0, 1/dim), so
  relevance spans only ~0.1 across the whole store and approximate nearest-neighbour indexes are
  weak on it (hnswlib at ef 96: recall ~0.4).

Metadata (both kinds): importance uniform on the integers 1..10, creation times uniform over
``days`` days, ``agents`` agents, 3 kinds; ``now`` for queries is the end of the period.
Generation is by fixed-size blocks with per-block seeds, so the first n records of a larger set
equal the n records of a smaller one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

KINDS = ("observation", "reflection", "plan")
DATA_KINDS = ("clustered", "unstructured")
_BLOCK = 10_000


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate."""

    data: str = "clustered"
    """``"clustered"`` or ``"unstructured"`` (see the module docstring)."""
    dim: int = 384
    """Embedding size."""
    days: float = 30.0
    """Creation times are uniform over [0, days * 86400) seconds."""
    agents: int = 25
    """Number of agents (names ``agent0`` ...)."""
    clusters: int = 1000
    """Cluster centres (clustered data only)."""
    noise: float = 1.0
    """Noise norm relative to the centre norm (clustered data only; 1.0: cos to centre ~0.7)."""
    seed: int = 0
    """Base seed of the records (queries have their own)."""

    def __post_init__(self) -> None:
        if self.data not in DATA_KINDS:
            raise ValueError(f"data: expected one of {DATA_KINDS}, got {self.data!r}")
        if self.dim < 1 or self.agents < 1 or self.clusters < 1 or not self.days > 0:
            raise ValueError("dim, agents, clusters: expected >= 1; days: expected > 0")

    @property
    def now(self) -> float:
        """The end of the creation period, seconds (the ``now`` of the benchmarks)."""
        return self.days * 86400.0


@dataclass(frozen=True)
class Batch:
    """Arguments of one :meth:`MemoryStore.add` call."""

    embeddings: np.ndarray
    """[n, dim] float32 unit vectors."""
    importance: np.ndarray
    """[n] integers 1..10."""
    created: np.ndarray
    """[n] float64 seconds."""
    agent: list[str]
    """[n] agent names."""
    kind: list[str]
    """[n] memory kinds."""


def centres(spec: SyntheticSpec) -> np.ndarray:
    """Cluster centres [clusters, dim] float32, unit norm."""
    c = np.random.default_rng(1234).standard_normal((spec.clusters, spec.dim)).astype(np.float32)
    return c / np.linalg.norm(c, axis=1, keepdims=True)


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _block(spec: SyntheticSpec, cent: np.ndarray | None, b: int) -> Batch:
    rng = np.random.default_rng([spec.seed, b])
    n, d = _BLOCK, spec.dim
    if spec.data == "clustered":
        which = rng.integers(0, spec.clusters, n)
        e = cent[which] + rng.standard_normal((n, d)).astype(np.float32) * (spec.noise / np.sqrt(d))
    else:
        e = rng.standard_normal((n, d)).astype(np.float32)
    imp = rng.integers(1, 11, n)
    created = rng.uniform(0, spec.now, n)
    agents = [f"agent{i}" for i in rng.integers(0, spec.agents, n)]
    kinds = [KINDS[i] for i in rng.integers(0, len(KINDS), n)]
    return Batch(_unit(e), imp, created, agents, kinds)


def batches(spec: SyntheticSpec, n: int, start: int = 0) -> Iterator[Batch]:
    """Records [start, n) of the data set in batches of at most 10,000."""
    if n < 0 or start < 0:
        raise ValueError(f"n, start: expected >= 0, got {n}, {start}")
    cent = centres(spec) if spec.data == "clustered" else None
    i = start
    while i < n:
        b, off = divmod(i, _BLOCK)
        full = _block(spec, cent, b)
        take = min(_BLOCK - off, n - i)
        sl = slice(off, off + take)
        yield Batch(full.embeddings[sl], full.importance[sl], full.created[sl], full.agent[sl], full.kind[sl])
        i += take


def queries(spec: SyntheticSpec, n: int, seed: int = 7) -> np.ndarray:
    """Queries [n, dim] float32, unit norm: noisy centres (clustered) or uniform directions."""
    rng = np.random.default_rng([seed, 99])
    d = spec.dim
    if spec.data == "clustered":
        c = centres(spec)[rng.integers(0, spec.clusters, n)]
        return _unit(c + rng.standard_normal((n, d)).astype(np.float32) * (spec.noise / np.sqrt(d)))
    return _unit(rng.standard_normal((n, d)).astype(np.float32))


def weight_grid(levels: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0)) -> list[tuple[float, float, float]]:
    """Every (w_rec, w_rel, w_imp) in levels^3 except all zeros (63 vectors for the default levels)."""
    return [(a, b, c) for a in levels for b in levels for c in levels if (a, b, c) != (0.0, 0.0, 0.0)]
