"""The ALFWorld modules' JSON helpers: the run harness's atomic writer and reader
(``metacog_fast.runs.records``), under the names this package has always used."""
from __future__ import annotations

from metacog_fast.runs.records import read_json, write_json_atomic

__all__ = ["read_json", "write_json_atomic"]
