"""The ``memory`` op under its earlier import path ``metacog_fast.kernels.memory_kernels``.

Its home is ``metacog_fast/ops/memory/`` (API and dispatch table in ``api.py``, the torch
reference in ``naive.py``, the backend glue beside them); this module re-exports its public
names so that code written against the earlier layout keeps working."""
from metacog_fast.ops.memory import (  # noqa: F401 - re-exported
    DECAY,
    UNIT_SECONDS,
    memory_rerank,
    memory_scores,
)

__all__ = ["DECAY", "UNIT_SECONDS", "memory_rerank", "memory_scores"]
