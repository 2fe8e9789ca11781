"""Cheap checks of what a flag's value names on this machine, run before a command does any work
or writes anything (``view(..., checks={field: fn})``, :mod:`metacog_fast.cli.dataclass_args`).

Each takes the value and raises ValueError saying what was expected; the caller prefixes the field,
and :func:`~metacog_fast.cli.dataclass_args.build` turns it into the flag's name. Nothing here
loads a model, opens an environment or touches the network: a URI is parsed, a path is looked up.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def llm_uri(value: str | None) -> None:
    """An LLM URI that :func:`metacog_fast.llm.uri.parse_uri` accepts (None: ``$METACOG_LLM``,
    checked too when set); a ``llama-cpp:///path`` must name an existing file or folder."""
    from metacog_fast.llm.uri import ENV_VAR, parse_uri

    raw, source = value, ""
    if raw is None:
        raw = os.environ.get(ENV_VAR, "").strip() or None
        source = f" (from ${ENV_VAR})"
    if raw is None:
        return
    try:
        u = parse_uri(raw)
    except ValueError as e:
        raise ValueError(f"{e}{source}") from None
    if u.scheme == "llama-cpp" and u.target and not Path(u.target).exists():
        raise ValueError(f"LLM backend URI {raw!r}{source}: no such GGUF file or model folder {u.target!r}")


def positive_int(value: Any, *, optional: bool = False) -> None:
    """An int >= 1 (or None where ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"expected an int >= 1{' or none' if optional else ''}, got {value!r}")


def optional_positive_int(value: Any) -> None:
    """An int >= 1 or None."""
    positive_int(value, optional=True)


def existing_dir(value: str | os.PathLike[str] | None) -> None:
    """None, or a folder that exists."""
    if value is not None and not Path(value).is_dir():
        what = "is a file" if Path(value).exists() else "does not exist"
        raise ValueError(f"expected an existing folder, got {str(value)!r} (it {what})")


def existing_file(value: str | os.PathLike[str] | None) -> None:
    """None, or a file that exists."""
    if value is not None and not Path(value).is_file():
        what = "is a folder" if Path(value).is_dir() else "does not exist"
        raise ValueError(f"expected an existing file, got {str(value)!r} (it {what})")
