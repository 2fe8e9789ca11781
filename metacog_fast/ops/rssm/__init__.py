"""RSSM + MUSE self-assessment / self-regulation (docs/design.md §1.1, §1.2); see :mod:`.api`."""
from metacog_fast.ops.rssm.api import (
    PRECISIONS,
    clear_cache,
    resolved_backend,
    rssm_imagine,
    rssm_img_step,
    rssm_obs_step,
    self_assess,
    self_regulate,
)
from metacog_fast.ops.rssm.sizes import DEFAULT_CLASSES, RssmSizes, infer_sizes, read_sizes, weight_names
from metacog_fast.ops.rssm.weights import META_WORLD_ACTION, PRESETS, init_rssm_weights

__all__ = [
    "DEFAULT_CLASSES", "META_WORLD_ACTION", "PRECISIONS", "PRESETS", "RssmSizes", "clear_cache", "infer_sizes",
    "init_rssm_weights", "read_sizes", "resolved_backend", "rssm_imagine", "rssm_img_step", "rssm_obs_step",
    "self_assess", "self_regulate", "weight_names",
]
