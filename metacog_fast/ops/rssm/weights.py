"""Fresh RSSM + actor + self-assessment weights with the docs/design.md §1.1 names."""
from __future__ import annotations

import numpy as np

from metacog_fast.ops._alloc import check_alloc

PRESETS: dict[str, dict[str, int]] = {"XS": {"D": 256, "Hd": 256}, "S": {"D": 512, "Hd": 512}}
"""docs/design.md presets (both with S=32 groups x C=32 classes)."""
META_WORLD_ACTION = 4
"""Meta-World action size (4-d in [-1, 1]): default A."""


def _layer_names(prefix: str, L: int) -> list[str]:
    return [f"{prefix}.{i}" for i in range(L)]


def init_rssm_weights(
    preset: str | None = "XS",
    *,
    D: int | None = None,
    Hd: int | None = None,
    S: int = 32,
    C: int = 32,
    A: int = META_WORLD_ACTION,
    E: int | None = None,
    L: int = 2,
    N: int = 5,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Fresh RSSM + actor + self-assessment weights with the docs/design.md §1.1 names.

    ``preset`` "XS" (D=Hd=256) or "S" (D=Hd=512) sets D and Hd unless given;
    ``preset=None`` needs both. ``E`` (embedding size) defaults to Hd: the
    width of the MLP encoder of Meta-World's state observation. Dense weights
    are Xavier-uniform, biases 0, LayerNorm gains 1 and biases 0. Returns
    float32 C-contiguous arrays.
    """
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"preset: expected one of {sorted(PRESETS)} or None, got {preset!r}")
        D = PRESETS[preset]["D"] if D is None else D
        Hd = PRESETS[preset]["Hd"] if Hd is None else Hd
    if D is None or Hd is None:
        raise ValueError("D, Hd: both are required when preset is None")
    E = Hd if E is None else E
    for name, v in (("D", D), ("Hd", Hd), ("S", S), ("C", C), ("A", A), ("E", E), ("L", L), ("N", N)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}: expected a positive int, got {v!r}")
    Z = S * C
    layers: list[tuple[str, int, int, bool, bool]] = [  # (name, out, in, bias, layer norm)
        ("img_in", Hd, Z + A, True, True), ("gru", 3 * D, Hd + D, False, True), ("img_out", Hd, D, True, True),
        ("img_logits", Z, Hd, True, False), ("obs_out", Hd, D + E, True, True), ("obs_logits", Z, Hd, True, False)]
    for prefix, n_out in (("actor", 2 * A), ("sa", N)):
        for i, name in enumerate(_layer_names(prefix, L)):
            layers.append((name, Hd, D + Z if i == 0 else Hd, True, True))
        layers.append((f"{prefix}.out", n_out, Hd, True, False))
    # float32 weights, plus the float64 draw of the largest matrix
    check_alloc("D, Hd, S, C, A, E, L, N", 4 * sum(o * i + 3 * o for _, o, i, _, _ in layers)
                + 8 * max(o * i for _, o, i, _, _ in layers), "the weights")
    rng = np.random.default_rng(seed)
    w: dict[str, np.ndarray] = {}
    for name, out, inp, bias, ln in layers:
        lim = np.sqrt(6.0 / (inp + out))
        w[f"{name}.w"] = rng.uniform(-lim, lim, size=(out, inp)).astype(np.float32)
        if bias:
            w[f"{name}.b"] = np.zeros(out, np.float32)
        if ln:
            w[f"{name}.ln.g"] = np.ones(out, np.float32)
            w[f"{name}.ln.b"] = np.zeros(out, np.float32)
    return w
