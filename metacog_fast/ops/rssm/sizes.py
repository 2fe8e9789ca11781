"""The sizes of an RSSM, read off its weights (docs/design.md §1.1): one type for every backend.

``read_sizes`` reads the shapes (what the reference and the GPU glue need; an RSSM without an
observation head has ``E = 0``); ``infer_sizes`` also cross-checks every weight's shape, naming the
first inconsistent key (what the public API runs once per weights mapping).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

DEFAULT_CLASSES = 32
"""Classes per categorical group C of docs/design.md (S=32 groups x C=32 classes)."""


@dataclass(frozen=True)
class RssmSizes:
    """Sizes of an RSSM + actor + self-assessment head (S and C need the stochastic layout)."""

    D: int
    """Deterministic (GRU) state size (gru.w rows / 3)."""
    Hd: int
    """Hidden width of every MLP layer (img_in.w rows)."""
    S: int
    """Categorical groups (Z / C)."""
    C: int
    """Classes per group (``classes=``, default 32, or Z / the last axis of ``u``)."""
    A: int
    """Action size (img_in.w columns - Z)."""
    E: int
    """Observation embedding size (obs_out.w columns - D); 0 when the weights have no obs_out."""
    L_actor: int
    """Hidden layers of the actor MLP."""
    L_sa: int
    """Hidden layers of the self-assessment MLP."""
    N: int
    """Self-assessment outputs (sa.out.w rows)."""

    @property
    def Z(self) -> int:
        """Stochastic size S*C."""
        return self.S * self.C

    @property
    def L(self) -> int:
        """Hidden layers of the actor and of the self-assessment MLP, which the GPU kernels need equal."""
        if self.L_actor != self.L_sa:
            raise ValueError(f"w: actor has {self.L_actor} hidden layers and sa has {self.L_sa}; "
                             "the cuda and triton kernels need them equal")
        return self.L_actor


def count_layers(w: Mapping[str, Any], prefix: str) -> int:
    """Hidden layers ``prefix.0``, ``prefix.1``, ... present in ``w``."""
    n = 0
    while f"{prefix}.{n}.w" in w:
        n += 1
    return n


class MissingWeight(KeyError):
    """A weight of docs/design.md §1.1 is not in the mapping (``key`` names it)."""

    def __init__(self, key: str) -> None:
        super().__init__(f"w: missing weight {key!r} (docs/design.md §1.1 names)")
        self.key = key


def _shape(w: Mapping[str, Any], key: str) -> tuple[int, ...]:
    if key not in w:
        raise MissingWeight(key)
    return tuple(int(d) for d in w[key].shape)


def _classes(Z: int, classes: int | None) -> int:
    if classes is None:
        return Z
    if not isinstance(classes, (int, np.integer)) or classes < 1 or Z % classes:
        raise ValueError(
            f"classes: Z = {Z} (img_logits.w rows) must be a multiple of classes, got classes={classes!r}; "
            "pass classes=C for your stochastic layout"
        )
    return int(classes)


def read_sizes(w: Mapping[str, Any], classes: int | None = DEFAULT_CLASSES) -> RssmSizes:
    """Sizes from the shapes of img_in.w, gru.w, img_logits.w, obs_out.w (optional), actor.*, sa.*.

    ``classes=None``: z taken as one group (S=1, C=Z), for operations that never split z (the
    self-assessment, the GPU kernels, which read S and C off ``u``). Raises ``KeyError`` for a
    missing weight and ``ValueError`` naming the weight whose shape contradicts the others.
    """
    if not isinstance(w, Mapping):
        raise TypeError(f"w: expected a mapping name -> array, got {type(w).__name__}")
    g = _shape(w, "gru.w")
    if len(g) != 2 or g[0] % 3:
        raise ValueError(f"weights['gru.w']: expected shape [3*D, Hd+D], got {list(g)}")
    D = g[0] // 3
    ii = _shape(w, "img_in.w")
    if len(ii) != 2:
        raise ValueError(f"weights['img_in.w']: expected shape [Hd, Z+A], got {list(ii)}")
    Hd = ii[0]
    if g[1] != Hd + D:
        raise ValueError(f"weights['gru.w']: expected shape [3*D, Hd+D] with Hd={Hd}, got {list(g)}")
    lg = _shape(w, "img_logits.w")
    if len(lg) != 2:
        raise ValueError(f"weights['img_logits.w']: expected shape [Z, Hd], got {list(lg)}")
    Z = lg[0]
    A = ii[1] - Z
    if A <= 0:
        raise ValueError(f"weights['img_in.w']: expected shape [Hd, Z+A] with Z={Z}, got {list(ii)}")
    E = 0
    if "obs_out.w" in w:
        oo = _shape(w, "obs_out.w")
        if len(oo) != 2 or oo[1] <= D:
            raise ValueError(f"weights['obs_out.w']: expected shape [Hd, D+E] with D={D}, got {list(oo)}")
        E = oo[1] - D
    ao = _shape(w, "actor.out.w")
    if len(ao) != 2 or ao[0] != 2 * A:
        raise ValueError(f"weights['actor.out.w']: expected shape [2*A={2 * A}, Hd], got {list(ao)}")
    N = _shape(w, "sa.out.w")[0]
    La, Ls = count_layers(w, "actor"), count_layers(w, "sa")
    if La < 1 or Ls < 1:
        raise ValueError("weights: expected at least one hidden layer 'actor.0.w' and 'sa.0.w'")
    C = _classes(Z, classes)
    return RssmSizes(D=D, Hd=Hd, S=Z // C, C=C, A=A, E=E, L_actor=La, L_sa=Ls, N=N)


def _expect(w: Mapping[str, Any], key: str, shape: tuple[int, ...]) -> None:
    got = _shape(w, key)
    if got != shape:
        raise ValueError(f"weights[{key!r}]: expected shape {list(shape)}, got {list(got)}")


def infer_sizes(w: Mapping[str, Any], classes: int | None = DEFAULT_CLASSES) -> RssmSizes:
    """:func:`read_sizes` plus a check of every weight's shape (the observation head included);
    ``ValueError`` naming the first inconsistent key."""
    if not isinstance(w, Mapping):
        raise TypeError(f"w: expected a mapping name -> array, got {type(w).__name__}")
    try:
        sz = read_sizes(w, classes)
    except MissingWeight as exc:  # the public API reports a missing weight as a bad value
        raise ValueError(f"weights: missing key {exc.key!r}") from None
    if sz.E == 0:
        raise ValueError("weights: missing key 'obs_out.w'")
    D, Hd, Z, A, E = sz.D, sz.Hd, sz.Z, sz.A, sz.E

    def block(name: str, inp: int, bias: bool = True) -> None:
        n = Hd if name != "gru" else 3 * D
        _expect(w, f"{name}.w", (n, inp))
        if bias:
            _expect(w, f"{name}.b", (n,))
        _expect(w, f"{name}.ln.g", (n,))
        _expect(w, f"{name}.ln.b", (n,))

    try:
        block("img_in", Z + A)
        block("gru", Hd + D, bias=False)
        block("img_out", D)
        _expect(w, "img_logits.w", (Z, Hd))
        _expect(w, "img_logits.b", (Z,))
        block("obs_out", D + E)
        _expect(w, "obs_logits.w", (Z, Hd))
        _expect(w, "obs_logits.b", (Z,))
        for prefix, L, n_out in (("actor", sz.L_actor, 2 * A), ("sa", sz.L_sa, sz.N)):
            for i in range(L):
                block(f"{prefix}.{i}", D + Z if i == 0 else Hd)
            _expect(w, f"{prefix}.out.w", (n_out, Hd))
            _expect(w, f"{prefix}.out.b", (n_out,))
    except MissingWeight as exc:
        raise ValueError(f"weights: missing key {exc.key!r}") from None
    return sz


def weight_names(sz: RssmSizes) -> list[str]:
    """Every key an RSSM weights mapping of these sizes holds."""
    names = ["img_in.w", "img_in.b", "img_in.ln.g", "img_in.ln.b", "gru.w", "gru.ln.g", "gru.ln.b"]
    for n in ("img_out", "obs_out"):
        names += [f"{n}.w", f"{n}.b", f"{n}.ln.g", f"{n}.ln.b"]
    names += ["img_logits.w", "img_logits.b", "obs_logits.w", "obs_logits.b"]
    for prefix, L in (("actor", sz.L_actor), ("sa", sz.L_sa)):
        for i in range(L):
            names += [f"{prefix}.{i}.{k}" for k in ("w", "b", "ln.g", "ln.b")]
        names += [f"{prefix}.out.w", f"{prefix}.out.b"]
    return names
