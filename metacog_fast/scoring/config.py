"""Configuration of the trajectory scorer M_sa."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from metacog_fast.scoring.encoder import EncoderConfig


@dataclass
class ScorerConfig:
    """Settings of :class:`~metacog_fast.scoring.scorer.TrajectoryScorer`."""

    hidden: tuple[int, ...] = (256, 64)
    """Hidden widths of g_eta (SiLU); input 2*emb_dim, output 1 (sigmoid)."""
    emb_dim: int = 384
    """Sentence embedding size of the encoder (MiniLM: 384)."""
    chunk_size: int = 4
    """(action, observation) pairs per training chunk (paper: 4)."""
    lr: float = 1e-3
    """Adam learning rate of g_eta (encoder frozen)."""
    weight_decay: float = 0.0
    """Adam L2 weight decay."""
    epochs: int = 30
    """Passes over the pre-deployment data in :meth:`fit`."""
    batch_size: int = 64
    """Minibatch size of every update."""
    incremental_steps: int = 50
    """Minibatch updates per :meth:`fit_incremental` call (default)."""
    replay_capacity: int = 20000
    """Examples kept per replay pool (pre-deployment, adaptation)."""
    replay_mix: float = 0.5
    """Fraction of each incremental minibatch drawn from the pre-deployment pool."""
    seed: int = 0
    """Seed of the head initialisation, minibatch order and replay sampling."""
    backend: str = "auto"
    """Kernel backend of ``score_trajectories`` at inference ("auto", "cpu", "triton", "torch")."""
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    """Encoder settings (precision, truncation, caches)."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hidden"] = list(self.hidden)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ScorerConfig":
        if not isinstance(d, dict):
            raise ValueError(f"config: expected a JSON object, got {type(d).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"config: unknown fields {sorted(unknown)}")
        d = dict(d)
        enc = d.pop("encoder", {}) or {}
        if not isinstance(enc, dict):
            raise ValueError("config['encoder']: expected a JSON object")
        enc_known = set(EncoderConfig.__dataclass_fields__)
        if set(enc) - enc_known:
            raise ValueError(f"config['encoder']: unknown fields {sorted(set(enc) - enc_known)}")
        if "hidden" in d:
            d["hidden"] = tuple(int(h) for h in d["hidden"])
        return cls(**d, encoder=EncoderConfig(**enc))
