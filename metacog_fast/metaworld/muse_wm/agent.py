"""The MUSE-WM acting agent (paper 000 §3, Algorithm 1), usable standalone in a control loop.

Per step: encoder(obs) -> ``rssm_obs_step`` (h_t and the posterior z_t of the observation)
-> ``self_assess`` (psi of the current state, exposed as ``agent.psi``) -> ``self_regulate``
(H iterations, beta) -> action. With ``self_regulation=False`` (Dreamer-v3) the same call runs
with H = 0, which is the plain actor sample. The recurrence uses the real posterior and the
executed action (h_{t+1} = f(h_t, z_t^post, a_t), computed by the next ``rssm_obs_step``);
the regulated ``h_next`` of Algorithm 1 only serves the decision.

    agent = MuseWMAgent.from_checkpoint("runs/x/pretrained")   # or a `metacog train learn` run folder
    agent = MuseWMAgent.from_pretrained("models/reach")       # an export: fp16, ~5 MB, model.json
    agent.reset()
    a = agent.act(obs)        # obs [O] float32 -> a [A] in [-1, 1]
    agent.psi                 # [N] self-assessment of the current state
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from metacog_fast.metaworld.muse_wm.checkpoint import load_acting_weights
from metacog_fast.metaworld.muse_wm.config import ActConfig
from metacog_fast.kernels import infer_sizes, rssm_obs_step, self_assess, self_regulate
from metacog_fast.ops.rssm.naive import LN_EPS


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


class NumpyEncoder:
    """The world model's observation encoder (symlog -> [Linear, LayerNorm, SiLU] x L -> Linear)
    evaluated in numpy from its torch ``state_dict`` (keys body.{3i}.*, body.{3i+1}.*, out.*)."""

    def __init__(self, sd: Mapping[str, np.ndarray]) -> None:
        self.layers: list[tuple[np.ndarray, ...]] = []
        i = 0
        while f"body.{3 * i}.weight" in sd:
            self.layers.append(tuple(np.asarray(sd[f"body.{3 * i + k}.{n}"], np.float32)
                                     for k, n in ((0, "weight"), (0, "bias"), (1, "weight"), (1, "bias"))))
            i += 1
        if "out.weight" not in sd:
            raise ValueError("encoder: missing key 'out.weight' (expected the Dreamer encoder state_dict)")
        self.out_w = np.asarray(sd["out.weight"], np.float32)
        self.out_b = np.asarray(sd["out.bias"], np.float32)
        self.in_dim = (self.layers[0][0] if self.layers else self.out_w).shape[1]
        self.out_dim = self.out_w.shape[0]

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        """obs [B, O] -> embed [B, E]."""
        x = np.sign(obs) * np.log1p(np.abs(obs))
        for w, b, g, bb in self.layers:
            x = x @ w.T + b
            m = x.mean(-1, keepdims=True)
            v = ((x - m) ** 2).mean(-1, keepdims=True)
            x = _silu((x - m) / np.sqrt(v + LN_EPS) * g + bb)
        return np.ascontiguousarray(x @ self.out_w.T + self.out_b, dtype=np.float32)


class MuseWMAgent:
    """Acting agent over RSSM weights (docs/design.md names) and encoder weights.

    ``weights``: name -> float32 array (docs/design.md §1.1, with actor.* and sa.*); ``encoder``: the
    encoder state_dict as numpy; ``act``: H, beta, sr_z, self_regulation, backend; ``classes``: C.
    Noise comes from ``numpy.random.default_rng(seed)`` (or pass ``u``/``eps`` to :meth:`act`).
    """

    def __init__(self, weights: Mapping[str, np.ndarray], encoder: Mapping[str, np.ndarray],
                 act: ActConfig | None = None, classes: int = 32, seed: int | None = 0) -> None:
        self.cfg = act or ActConfig()
        if self.cfg.sr_z not in ("prior", "posterior"):
            raise ValueError(f"sr_z: expected 'prior' or 'posterior', got {self.cfg.sr_z!r}")
        self.classes = classes
        self.rng = np.random.default_rng(seed)
        self.load(weights, encoder)
        self.reset()

    def load(self, weights: Mapping[str, np.ndarray], encoder: Mapping[str, np.ndarray]) -> None:
        """Swap in new weights (after training updates); keeps the recurrent state."""
        self.w = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()}
        self.sizes = infer_sizes(self.w, self.classes)
        self.encoder = NumpyEncoder(encoder)
        if self.encoder.out_dim != self.sizes.E:
            raise ValueError(f"encoder: output size {self.encoder.out_dim} != RSSM embedding size E={self.sizes.E}")

    @property
    def obs_dim(self) -> int:
        return int(self.encoder.in_dim)

    def reset(self) -> None:
        """Start of an episode: zero recurrent state and previous action."""
        sz = self.sizes
        self.h = np.zeros((1, sz.D), np.float32)
        self.z = np.zeros((1, sz.Z), np.float32)
        self.a = np.zeros((1, sz.A), np.float32)
        self.psi = np.zeros(sz.N, np.float32)
        self.psi_trace: np.ndarray | None = None
        self.t = 0

    def act(self, obs: np.ndarray, u: np.ndarray | None = None, u_prior: np.ndarray | None = None,
            eps: np.ndarray | None = None) -> np.ndarray:
        """obs [O] -> action [A]. Optional explicit noise: u [1, S] (posterior sample),
        u_prior [1, S] (prior sample, sr_z="prior"), eps [H+1, 1, A] (actor)."""
        sz, cfg = self.sizes, self.cfg
        x = np.asarray(obs, dtype=np.float32).reshape(1, -1)
        if x.shape[1] != self.obs_dim:
            raise ValueError(f"obs: expected shape [{self.obs_dim}], got {list(np.shape(obs))}")
        if not np.isfinite(x).all():
            raise ValueError("obs: contains NaN or Inf")
        H = cfg.H if cfg.self_regulation else 0
        if u is None:
            u = self.rng.random((1, sz.S), dtype=np.float32)
        if eps is None:
            eps = self.rng.standard_normal((H + 1, 1, sz.A), dtype=np.float32)
        embed = self.encoder(x)
        h, z, _ = rssm_obs_step(self.w, self.h, self.z, self.a, embed, u, classes=self.classes, backend=cfg.backend)
        s = np.concatenate([h, z], -1)
        self.psi = np.asarray(self_assess(self.w, s, classes=self.classes, backend=cfg.backend))[0]
        z_in = z if (not cfg.self_regulation or cfg.sr_z == "posterior") else None
        if z_in is None and u_prior is None:
            u_prior = self.rng.random((1, sz.S), dtype=np.float32)
        out = self_regulate(self.w, h, z_in, H=H, beta=cfg.beta, eps=eps, u=None if z_in is not None else u_prior,
                            trace=True, classes=self.classes, backend=cfg.backend)
        a_t = np.asarray(out[1], np.float32)
        self.psi_trace = np.asarray(out[3])[:, 0] if H else None
        self.h, self.z, self.a = h, z, a_t
        self.t += 1
        return a_t[0].copy()

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, act: ActConfig | None = None, seed: int | None = 0) -> "MuseWMAgent":
        """Load an acting export (``metacog train export``: ``acting.safetensors`` fp16 + ``model.json``,
        checked against its sha256) from a folder, or by the name of one shipped in the package
        (:func:`metacog_fast.metaworld.muse_wm.export.pretrained_names`). ``act`` overrides the
        exported acting config (e.g. ``ActConfig(self_regulation=False)`` for Dreamer-v3)."""
        from metacog_fast.metaworld.muse_wm.export import load_pretrained

        ck, _ = load_pretrained(name_or_path)
        return cls(ck.weights, ck.encoder, act or ck.act, classes=ck.classes, seed=seed)

    @classmethod
    def from_checkpoint(cls, path: str | Path, act: ActConfig | None = None, seed: int | None = 0) -> "MuseWMAgent":
        """Load ``<path>.safetensors`` + ``<path>.json`` written by :mod:`metacog_fast.metaworld.train.checkpoint`,
        or a learning run's folder (its ``ckpt/latest``; only what acting needs: :func:`metacog_fast.metaworld.muse_wm.checkpoint.load_acting_weights`)."""
        ck = load_acting_weights(path)
        return cls(ck.weights, ck.encoder, act or ck.act, classes=ck.classes, seed=seed)
