"""Backend discovery and selection shared by every kernel.

``backend=`` accepts ``"auto" | "cpu" | "cuda" | "triton" | "torch"``. Nothing
falls back silently: asking for a backend this build or machine lacks raises
:class:`BackendUnavailable` with the way to get it.
"""
from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType
from typing import Any

BACKENDS = ("auto", "cpu", "cuda", "triton", "torch")

CUDA_BUILD_HINT = (
    "rebuild with the CUDA backend: METACOG_BACKEND=cuda pip install --no-build-isolation -e . "
    "(needs nvcc; set METACOG_CUDA_ARCHITECTURES, default 90)"
)


class BackendUnavailable(RuntimeError):
    """A requested backend is not part of this build or not usable on this machine."""


@functools.lru_cache(maxsize=1)
def _import_core() -> ModuleType | None:
    # METACOG_CORE_PATH: a build folder holding _core*.so (scripts/dev_build.sh), used
    # instead of the installed extension: a fast rebuild loop without reinstalling.
    override = os.environ.get("METACOG_CORE_PATH")
    if override:
        return _load_core_from(override)
    try:
        return importlib.import_module("metacog_fast._core")
    except ImportError:
        return None


def _load_core_from(folder: str) -> ModuleType:
    import glob
    import importlib.util
    import sys

    found = sorted(glob.glob(os.path.join(folder, "_core*.so")))
    if not found:
        raise BackendUnavailable(f"METACOG_CORE_PATH={folder!r} holds no _core*.so: run scripts/dev_build.sh {folder}")
    spec = importlib.util.spec_from_file_location("metacog_fast._core", found[0])
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules["metacog_fast._core"] = mod
    return mod


def core() -> ModuleType:
    """The compiled extension; raises :class:`BackendUnavailable` if it was not built."""
    mod = _import_core()
    if mod is None:
        raise BackendUnavailable(
            "metacog_fast._core is not built: install the package with "
            "`pip install --no-build-isolation -e .` (see README)"
        )
    return mod


@functools.lru_cache(maxsize=1)
def _triton_status() -> dict[str, Any]:
    try:
        import triton  # noqa: F401

        version = triton.__version__
    except Exception as exc:  # pragma: no cover - depends on the install
        return {"importable": False, "error": str(exc)}
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    gpu = _torch_cuda_available()
    return {"importable": True, "version": version, "interpret": interpret, "usable": gpu or interpret}


def _torch_cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # pragma: no cover
        return False


def backends() -> dict[str, Any]:
    """What this build has.

    Returns a dict with ``cpu`` (ISA paths compiled, supported and selected;
    OpenMP threads), ``cuda`` (version, archs, devices, or ``None`` when not
    built), ``triton`` (importable, usable) and ``torch`` (version, CUDA).
    """
    info: dict[str, Any] = {}
    mod = _import_core()
    if mod is None:
        info["core"] = None
        info["cpu"] = None
        info["cuda"] = None
    else:
        b = mod.build_info()
        info["core"] = {"version": b["version"], "compiler": b["compiler"]}
        info["cpu"] = {
            "isa_compiled": list(b["isa_compiled"]),
            "isa_supported": list(b["isa_supported"]),
            "isa_selected": b["isa_selected"],
            "openmp_threads": b["openmp_threads"],
        }
        info["cuda"] = b["cuda"]
    info["triton"] = _triton_status()
    try:
        import torch

        info["torch"] = {"version": torch.__version__, "cuda_available": torch.cuda.is_available()}
    except Exception:  # pragma: no cover
        info["torch"] = None
    return info


def core_built() -> bool:
    """Whether the compiled extension is importable (``METACOG_CORE_PATH`` included)."""
    return _import_core() is not None


def cuda_built() -> bool:
    mod = _import_core()
    return mod is not None and mod.build_info()["cuda"] is not None


def resolve_backend(backend: str, *, on_gpu: bool = False, has: tuple[str, ...] = BACKENDS) -> str:
    """Turn ``backend`` into a concrete one, or raise.

    ``on_gpu``: the inputs live on a CUDA device. ``has``: the backends the
    calling kernel implements. ``auto`` picks cuda for GPU inputs when built,
    else cpu (the torch reference if the kernel has no compiled path).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        if on_gpu and "cuda" in has and cuda_built():
            return "cuda"
        if on_gpu and "triton" in has and _triton_status().get("usable"):
            return "triton"
        if not on_gpu and "cpu" in has and _import_core() is not None:
            return "cpu"
        return "torch"
    if backend not in has:
        raise BackendUnavailable(f"backend={backend!r} is not implemented for this kernel; available: {has}")
    if backend == "cpu":
        core()
    elif backend == "cuda":
        if not cuda_built():
            raise BackendUnavailable(f"backend='cuda' requested but this build has no CUDA: {CUDA_BUILD_HINT}")
        info = core().build_info()["cuda"]
        if info["devices"] < 1:
            raise BackendUnavailable("backend='cuda' requested but no CUDA device is visible on this machine")
    elif backend == "triton":
        st = _triton_status()
        if not st.get("importable"):
            raise BackendUnavailable("backend='triton' requested but triton is not importable: pip install 'metacog_fast[triton]'")
        if not st.get("usable"):
            raise BackendUnavailable(
                "backend='triton' requested but there is no GPU; set TRITON_INTERPRET=1 to run Triton "
                "kernels on the CPU interpreter (slow, for testing)"
            )
    return backend
