"""The ``rssm`` op under its earlier import path ``metacog_fast.kernels.rssm``.

Its home is ``metacog_fast/ops/rssm/`` (API and dispatch table in ``api.py``, the torch
reference in ``naive.py``, the backend glue beside them); this module re-exports its public
names so that code written against the earlier layout keeps working."""
from metacog_fast.ops.rssm import (  # noqa: F401 - re-exported
    DEFAULT_CLASSES,
    META_WORLD_ACTION,
    PRECISIONS,
    PRESETS,
    RssmSizes,
    clear_cache,
    infer_sizes,
    init_rssm_weights,
    read_sizes,
    resolved_backend,
    rssm_imagine,
    rssm_img_step,
    rssm_obs_step,
    self_assess,
    self_regulate,
    weight_names,
)

__all__ = [
    "DEFAULT_CLASSES", "META_WORLD_ACTION", "PRECISIONS", "PRESETS", "RssmSizes", "clear_cache", "infer_sizes",
    "init_rssm_weights", "read_sizes", "resolved_backend", "rssm_imagine", "rssm_img_step", "rssm_obs_step",
    "self_assess", "self_regulate", "weight_names",
]
