"""The dispatch table of one op: backend name -> the module implementing it.

Every backend module of an op exposes the same function names with the same signatures, so an op's
API resolves the backend once (:func:`metacog_fast._backend.resolve_backend`, which never falls back
silently) and then calls ``table.impl(backend).<function>(...)``: no per-function ``if backend ==``
chains. Modules are imported on first use, so a backend's dependencies (triton, a CUDA build) are
only needed when that backend is asked for.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Mapping

from metacog_fast._backend import BackendUnavailable, resolve_backend


class DispatchTable:
    """``op``: the op's name (for errors); ``modules``: backend -> module path."""

    def __init__(self, op: str, modules: Mapping[str, str]) -> None:
        self.op = op
        self.modules = dict(modules)
        self.backends: tuple[str, ...] = tuple(self.modules)
        self._loaded: dict[str, ModuleType] = {}
        self._resolved: dict[tuple[str, bool], str] = {}

    def resolve(self, backend: str, *, on_gpu: bool = False, has: tuple[str, ...] | None = None) -> str:
        """The concrete backend for ``backend`` (``"auto"`` included); raises rather than fall back.

        With the table's own backends the answer is remembered: what a build and a machine offer
        does not change within a process (the core, CUDA and Triton are probed once)."""
        if has is not None:
            return resolve_backend(backend, on_gpu=on_gpu, has=has)
        key = (backend, on_gpu)
        be = self._resolved.get(key)
        if be is None:
            be = self._resolved[key] = resolve_backend(backend, on_gpu=on_gpu, has=self.backends)
        return be

    def impl(self, backend: str) -> ModuleType:
        """The module of a concrete backend (imported once)."""
        mod = self._loaded.get(backend)
        if mod is not None:
            return mod
        path = self.modules.get(backend)
        if path is None:
            raise BackendUnavailable(f"backend={backend!r} is not implemented for {self.op}; available: {self.backends}")
        try:
            mod = importlib.import_module(path)
        except ImportError as exc:
            raise BackendUnavailable(f"backend={backend!r} of {self.op}: cannot import {path}: {exc}") from exc
        self._loaded[backend] = mod
        return mod

    def __call__(self, backend: str, *, on_gpu: bool = False) -> ModuleType:
        """``impl(resolve(backend))``."""
        be = self._resolved.get((backend, on_gpu))
        mod = self._loaded.get(be) if be is not None else None
        return mod if mod is not None else self.impl(self.resolve(backend, on_gpu=on_gpu))
