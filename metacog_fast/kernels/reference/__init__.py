"""Readable torch references of the compiled kernels.

Every compiled backend (cpu, cuda, triton) is tested against these functions.
They are pure functions of a weights mapping (name -> torch tensor) and inputs,
so the training ``nn.Module`` (metacog_fast.models) calls them too and autograd
gives their gradients.
"""
from __future__ import annotations

from metacog_fast.kernels.reference.rssm import (
    LN_EPS,
    UNIMIX,
    RssmSizes,
    actor_sample,
    actor_stats,
    img_step,
    imagine,
    infer_sizes,
    layer_norm,
    obs_step,
    posterior_logits,
    prior_logits,
    sa_logits,
    sample_categorical,
    self_assess,
    self_regulate,
    sequence_model,
)

__all__ = [
    "LN_EPS",
    "UNIMIX",
    "RssmSizes",
    "actor_sample",
    "actor_stats",
    "img_step",
    "imagine",
    "infer_sizes",
    "layer_norm",
    "obs_step",
    "posterior_logits",
    "prior_logits",
    "sa_logits",
    "sample_categorical",
    "self_assess",
    "self_regulate",
    "sequence_model",
]
