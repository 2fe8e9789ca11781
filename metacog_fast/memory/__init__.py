"""Agent memory (docs/design.md §1.4, paper 001): a persistent long-term store with the
generative-agents retrieval score, and a per-agent short-term buffer.

See docs/memory.md.
"""
from __future__ import annotations

from metacog_fast.memory.config import MemoryConfig
from metacog_fast.memory.db import DamagedStoreError, SchemaError
from metacog_fast.memory.index import StaleDatabaseError
from metacog_fast.memory.lockfile import StoreLockedError
from metacog_fast.memory.short_term import ShortTermConfig, ShortTermItem, ShortTermMemory
from metacog_fast.memory.store import MemoryRecord, MemoryStore

__all__ = ["DamagedStoreError", "MemoryConfig", "MemoryRecord", "MemoryStore", "SchemaError", "ShortTermConfig", "ShortTermItem",
           "ShortTermMemory", "StaleDatabaseError", "StoreLockedError"]
