"""Public kernels. Each name lives in its own module beside its torch reference;
this package imports them lazily so that ``import metacog_fast.kernels`` is cheap.

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
    # Trajectory scoring (docs/design.md §1.3)
    "score_trajectories": "scoring",
    "init_scoring_head": "scoring",
    "mean_pool_l2norm": "scoring",
    # Memory retrieval rerank (docs/design.md §1.4)
    "memory_scores": "memory_kernels",
    "memory_rerank": "memory_kernels",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'metacog_fast.kernels' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
