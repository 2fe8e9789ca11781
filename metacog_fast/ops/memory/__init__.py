"""Memory retrieval score and exact rerank (docs/design.md §1.4); see :mod:`.api`."""
from metacog_fast.ops.memory.api import memory_rerank, memory_scores
from metacog_fast.ops.memory.naive import DECAY, UNIT_SECONDS

__all__ = ["DECAY", "UNIT_SECONDS", "memory_rerank", "memory_scores"]
