"""Command-line flags generated from a configuration dataclass.

Each field becomes ``--<prefix><field-name>``; its help is the docstring written under the field
(the attribute-docstring convention of this package), its default the field's default. Types:
``int``, ``float``, ``str``, ``bool`` (``--flag`` / ``--no-flag``), ``X | None`` (the word
``none`` gives None) and ``tuple[X, ...]`` (comma-separated).
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import typing
from typing import Any


def field_docs(cls: type) -> dict[str, str]:
    """{field name: the docstring under it} of a dataclass (empty for fields without one)."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, nxt in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                out[node.target.id] = " ".join(nxt.value.value.split())
    return out


def _parser_for(tp: Any, name: str) -> tuple[Any, bool]:
    """(str -> value converter, is_optional) for a field type."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and type(None) in args:
        inner = next(a for a in args if a is not type(None))
        conv, _ = _parser_for(inner, name)
        return (lambda s: None if s.lower() == "none" else conv(s)), True
    if origin is tuple:
        inner = args[0] if args else str
        conv, _ = _parser_for(inner, name)
        return (lambda s: tuple(conv(x.strip()) for x in s.split(",") if x.strip())), False
    if tp in (int, float, str):
        return tp, False
    raise TypeError(f"{name}: no command-line parser for type {tp!r}")


def add_dataclass_arguments(p: argparse.ArgumentParser | Any, cls: type, prefix: str = "",
                            skip: tuple[str, ...] = ()) -> None:
    """Add a flag per field of ``cls`` (not those in ``skip``) to ``p``; dest = ``<prefix><field>``."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        flag = "--" + (prefix + f.name).replace("_", "-")
        dest = prefix + f.name
        help_text = docs.get(f.name, "").replace("%", "%%")  # argparse formats help with %
        tp = hints[f.name]
        if tp is bool:
            p.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=default,
                           help=f"{help_text} (default {default})")
            continue
        conv, _ = _parser_for(tp, f.name)
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        p.add_argument(flag, dest=dest, type=conv, default=default, help=f"{help_text} (default {shown})")


def dataclass_from_args(cls: type, args: argparse.Namespace, prefix: str = "", **fixed: Any) -> Any:
    """``cls`` built from the parsed flags of :func:`add_dataclass_arguments` (plus ``fixed``)."""
    kw = {f.name: getattr(args, prefix + f.name) for f in dataclasses.fields(cls)
          if f.name not in fixed and hasattr(args, prefix + f.name)}
    return cls(**kw, **fixed)
