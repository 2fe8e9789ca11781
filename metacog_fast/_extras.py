"""The optional parts of the package (pip extras) and the one way to ask for one.

``pip install metacog_fast`` gives the core: kernels, memory, scoring, metrics, the run harness and
the ``metacog`` command. Each benchmark suite, the LLM runtime, Ray, fine-tuning and Triton is an
extra (``pyproject.toml``; the table of what each adds is in docs/install.md). Code that needs an
extra imports it lazily through :func:`require`, so a missing extra is an :class:`MissingExtra`
naming the fix instead of a bare ``ModuleNotFoundError``. :func:`status` (``metacog info``) says
which extras are installed.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import re
from types import ModuleType
from typing import Any

EXTRAS: dict[str, str] = {
    "alfworld": "the ALFWorld environment, its agents, `metacog run|pretrain|report alfworld`, `metacog learn`",
    "scienceworld": "the ScienceWorld environment, its agent, `metacog run|report scienceworld` (needs Java >= 8)",
    "metaworld": "the Meta-World environment, MUSE-WM and Dreamer-v3 training, `metacog train|adapt`",
    "llm": "local LLMs: the llama-cpp:// backend, the default SmolLM2 model, GGUF adapters",
    "ray": "the run harness's Ray executor (`--executor ray`)",
    "finetune": "fine-tuning the ALFWorld actor and scorer (`metacog finetune`): transformers, peft, trl",
    "triton": "the Triton kernels (backend='triton'; on a CPU only with TRITON_INTERPRET=1)",
    "gpu": "GPU machines: Triton and vLLM (the vllm:// backend)",
}
"""{extra: what it adds}; the runtime extras of ``pyproject.toml`` (``test`` and ``all`` aside)."""

DISTRIBUTION = "metacog_fast"


class MissingExtra(ImportError):
    """A feature needs an extra that is not installed; the message names it and the pip command."""

    def __init__(self, message: str, extra: str) -> None:
        super().__init__(message)
        self.extra = extra


def install_hint(extra: str) -> str:
    """``pip install 'metacog_fast[extra]'``."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def require(module: str, extra: str, what: str | None = None) -> ModuleType:
    """Import ``module`` (e.g. ``"alfworld"``) and return it, or raise :class:`MissingExtra`:
    ``"<what> needs the [<extra>] extra: pip install 'metacog_fast[<extra>]' (No module named ...)"``.

    ``what``: the feature asking, as the user knows it (``"metacog run alfworld"``); default: the module.
    Only a module that cannot be found becomes :class:`MissingExtra`; any other error of the import
    (a broken install) propagates as it is."""
    if extra not in EXTRAS:
        raise ValueError(f"extra: expected one of {sorted(EXTRAS)}, got {extra!r}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        raise MissingExtra(f"{what or module} needs the [{extra}] extra: {install_hint(extra)} ({exc})", extra) from exc


_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
_SELF_EXTRAS = re.compile(r"^\s*metacog[-_.]fast\s*\[([^\]]+)\]", re.IGNORECASE)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_requirements(requires: list[str] | None = None) -> dict[str, list[str]]:
    """{extra: the distribution names it requires}, read from the installed package's metadata
    (``requires``: its ``Requires-Dist`` lines; default: ``importlib.metadata.requires``). An extra
    that names the package itself (``metacog_fast[a,b]``) is expanded. Raises
    ``importlib.metadata.PackageNotFoundError`` when metacog_fast is not installed."""
    if requires is None:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    direct: dict[str, list[str]] = {}
    for line in requires:
        marker = _EXTRA_MARKER.search(line)
        if marker is None:
            continue
        direct.setdefault(marker.group(1), []).append(line.split(";", 1)[0].strip())

    def expand(extra: str, seen: frozenset[str]) -> list[str]:
        out: list[str] = []
        for req in direct.get(extra, []):
            sub = _SELF_EXTRAS.match(req)
            if sub is not None:
                for name in sub.group(1).split(","):
                    if name.strip() not in seen:
                        out += expand(name.strip(), seen | {name.strip()})
                continue
            m = _NAME.match(req)
            if m is not None and _canonical(m.group(1)) not in out:
                out.append(_canonical(m.group(1)))
        return out

    return {extra: expand(extra, frozenset({extra})) for extra in direct}


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def status(requires: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """{extra: {"installed": bool, "missing": [distributions], "adds": what it adds}} for each extra
    of :data:`EXTRAS`, from the installed distributions (nothing is imported). With no metadata of
    metacog_fast (run from a source tree that was never installed) every entry says so in ``missing``."""
    try:
        reqs = extra_requirements(requires)
    except importlib.metadata.PackageNotFoundError:
        return {e: {"installed": False, "missing": [f"{DISTRIBUTION} is not installed"], "adds": a} for e, a in EXTRAS.items()}
    out: dict[str, dict[str, Any]] = {}
    for extra, adds in EXTRAS.items():
        if extra not in reqs:  # metadata of an install older than this extra
            missing = [f"the installed {DISTRIBUTION} has no [{extra}] extra: reinstall it"]
        else:
            missing = [d for d in reqs[extra] if not _installed(d)]
        out[extra] = {"installed": not missing, "missing": missing, "adds": adds}
    return out
