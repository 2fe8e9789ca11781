"""Public kernels: the one public import path of the ops in ``metacog_fast/ops/<op>/`` (each with
its checks, one dispatch table, its readable torch reference ``naive.py`` and its backend glue;
``metacog_fast.ops`` is the implementation, private by convention).

Names are imported lazily (on first attribute access) so that ``import metacog_fast.kernels``
imports neither torch nor numpy nor any op.

See docs/kernels.md for the API and shapes.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    # RSSM / MUSE-WM (docs/design.md §1.1, §1.2)
    "rssm_img_step": "rssm",
    "rssm_obs_step": "rssm",
    "rssm_imagine": "rssm",
    "self_assess": "rssm",
    "self_regulate": "rssm",
    "init_rssm_weights": "rssm",
    "infer_sizes": "rssm",
    "RssmSizes": "rssm",
    # Trajectory scoring (docs/design.md §1.3)
    "score_trajectories": "scoring",
    "init_scoring_head": "scoring",
    "mean_pool_l2norm": "scoring",
    # The int8 MiniLM encoder's fused steps (docs/scoring.md)
    "quantize_weight": "encoder",
    "quantize_rows": "encoder",
    "dequantize_rows": "encoder",
    "dequantize_gelu_quantize": "encoder",
    "dequantize_add_layernorm": "encoder",
    "attention": "encoder",
    # Memory retrieval rerank (docs/design.md §1.4)
    "memory_scores": "memory",
    "memory_rerank": "memory",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    op = _EXPORTS.get(name)
    if op is None:
        raise AttributeError(f"module 'metacog_fast.kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"metacog_fast.ops.{op}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
