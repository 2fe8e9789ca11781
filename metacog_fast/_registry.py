"""``resolve("module:name")``: how a registry reaches code above it without importing it.

Registries of the floors (environment factories and probes, the ``metacog`` commands, experiment
``call`` steps) and of a family hosting another's sub-commands hold ``"module:name"`` strings and
resolve them when used, so that no import arrow runs back up the layers.
"""
from __future__ import annotations

import importlib
from typing import Any


def resolve(spec: str) -> Any:
    """The object ``name`` of module ``module`` for ``spec = "module:name"`` (the module is imported)."""
    module, sep, name = spec.partition(":")
    if not sep or not module or not name or ":" in name:
        raise ValueError(f"spec: expected 'module:name', got {spec!r}")
    return getattr(importlib.import_module(module), name)
