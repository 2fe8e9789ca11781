"""metacog_fast: fast kernels and agents for metacognitive AI.

The compiled core (``metacog_fast._core``) is imported lazily, so ``import
metacog_fast`` works on any machine; :func:`backends` reports what this build has.
"""
from __future__ import annotations

from metacog_fast._backend import BackendUnavailable, backends, core, core_built, resolve_backend

__version__ = "0.1.0"
__all__ = ["__version__", "backends", "core", "core_built", "resolve_backend", "BackendUnavailable"]
