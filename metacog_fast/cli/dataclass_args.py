"""Command-line flags generated from configuration dataclasses: the one place argparse meets a config.

Each field of a dataclass becomes ``--<prefix><field-name>`` (underscores -> dashes). Its help is
the docstring written under the field (the attribute-docstring convention of this package), its
default the field's default (defaults live only in the dataclasses), and a field without a default
is a required flag. Types:

- ``int``, ``float``, ``str``; ``Literal["a", "b"]`` (the values become the choices);
- ``bool``: ``--flag`` / ``--no-flag``; ``bool | None`` the same, None when neither is given;
- ``X | None``: the word ``none`` gives None;
- ``tuple[X, ...]`` / ``list[X]``: comma-separated (``--tasks 1,2,3``), or space-separated when the
  field is given ``nargs``;
- a field whose type is itself a dataclass is skipped (add that dataclass as its own :class:`Flags`
  and pass the built object to the outer one).

A command describes its configuration as a tuple of :class:`Flags`, one per dataclass, adds them
with :func:`add_config_flags` and builds the objects back with :func:`configs_from_args`, in the
same order. Adding another dataclass to a command is one more ``Flags(...)`` in its tuple.
``Flags`` also carries what a command line needs beyond the field itself, so that no spelling users
type ever has to change: extra spellings (``aliases``), spellings that set a bool field to False
(``negations``), choices for a ``str`` field, a converter for a custom syntax (``parsers``),
``nargs``, and fields taken as positional arguments.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence


class ConfigError(ValueError):
    """A parsed command line that its configuration rejects; the message names the flag."""


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


def field_default(f: dataclasses.Field) -> Any:
    """The default of a dataclass field (``dataclasses.MISSING`` when it has none)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


@dataclass(frozen=True)
class Flags:
    """How one configuration dataclass appears on a command line."""

    cls: type
    """The dataclass; one flag per field."""
    prefix: str = ""
    """Put before every field name in the flag and the namespace attribute (``"agent_"`` ->
    ``--agent-max-steps``); for two dataclasses of one command whose field names collide."""
    only: tuple[str, ...] | None = None
    """Only these fields get flags (None: all)."""
    skip: tuple[str, ...] = ()
    """Fields that get no flag (they keep their dataclass default, or are passed by the command)."""
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """{field: more spellings of its flag}, e.g. ``{"test_episodes": ("--episodes",)}``; a bool
    field's ``--no-`` forms come with them."""
    negations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """{bool field: spellings that set it to False}, e.g. ``{"show_strategic": ("--hide-strategic",)}``."""
    choices: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    """{field: allowed values} for fields typed ``str`` (a ``Literal`` type gives them itself)."""
    parsers: Mapping[str, Callable[[str], Any]] = field(default_factory=dict)
    """{field: str -> value} for a syntax of its own (e.g. task ranges ``0-29``); raise ValueError
    on bad text."""
    shown: Mapping[str, str] = field(default_factory=dict)
    """{field: how its default is written in the help} where ``parsers`` reads a syntax of its own."""
    nargs: Mapping[str, str] = field(default_factory=dict)
    """{tuple/list field: argparse nargs} to take its items as separate words (``--checkpoint A B``)."""
    positional: tuple[str, ...] = ()
    """Fields taken as positional arguments (in this order) instead of flags; they must be given."""
    required: tuple[str, ...] = ()
    """Fields whose flag must be given although the dataclass has a default."""
    validate: bool = True
    """Call the built object's ``validate()`` when it has one."""

    def fields(self) -> list[dataclasses.Field]:
        """The fields that get a flag or a positional argument."""
        hints = _hints(self.cls)
        out = []
        for f in dataclasses.fields(self.cls):
            if f.name in self.skip or (self.only is not None and f.name not in self.only):
                continue
            if dataclasses.is_dataclass(_strip_optional(hints[f.name])):
                continue
            out.append(f)
        return out

    def flag(self, name: str) -> str:
        """The canonical flag of field ``name`` (``--`` + kebab case)."""
        return "--" + (self.prefix + name).replace("_", "-")

    def dest(self, name: str) -> str:
        return self.prefix + name


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception as e:  # an annotation that cannot be resolved at run time
        raise TypeError(f"{cls.__name__}: cannot resolve field types for command-line flags ({e})") from None


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return tp


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string"}


def _scalar(tp: Any, choices: Sequence[Any] | None) -> Callable[[str], Any]:
    """str -> value for an int/float/str/Literal type; errors say what was expected."""
    if typing.get_origin(tp) is typing.Literal:
        choices = typing.get_args(tp)
        tp = type(choices[0])
    if tp not in _TYPE_WORDS:
        raise TypeError(f"no command-line parser for type {tp!r}")

    def convert(text: str) -> Any:
        try:
            value = tp(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {_TYPE_WORDS[tp]}, got {text!r}") from None
        if choices is not None and value not in choices:
            raise argparse.ArgumentTypeError(
                f"expected one of {', '.join(map(str, choices))}; got {text!r}")
        return value

    convert.__name__ = tp.__name__
    return convert


def _literal_choices(tp: Any) -> tuple[Any, ...] | None:
    tp = _strip_optional(tp)
    return typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else None


def _converter(spec: Flags, f: dataclasses.Field, tp: Any) -> tuple[Callable[[str], Any], bool]:
    """(str -> value, is a sequence field taking nargs) for one field."""
    name = f.name
    if name in spec.parsers:
        custom = spec.parsers[name]

        def parse(text: str) -> Any:
            try:
                return custom(text)
            except ValueError as e:
                raise argparse.ArgumentTypeError(str(e)) from None

        parse.__name__ = name
        return parse, False
    optional = _is_optional(tp)
    inner = _strip_optional(tp)
    choices = spec.choices.get(name)
    origin = typing.get_origin(inner)
    if origin in (tuple, list):
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        item = _scalar(args[0] if args else str, choices)
        if name in spec.nargs:
            return item, True
        container = tuple if origin is tuple else list

        def convert_seq(text: str) -> Any:
            if optional and text.lower() == "none":
                return None
            return container(item(x.strip()) for x in text.split(",") if x.strip())

        convert_seq.__name__ = "list"
        return convert_seq, False
    scalar = _scalar(inner, choices)
    if not optional:
        return scalar, False

    def convert_opt(text: str) -> Any:
        return None if text.lower() == "none" else scalar(text)

    convert_opt.__name__ = scalar.__name__
    return convert_opt, False


def _shown(default: Any) -> str:
    if isinstance(default, (tuple, list)):
        return ",".join(map(str, default)) if default else "empty"
    return "none" if default is None else str(default)


def add_config_flags(p: argparse.ArgumentParser | Any, *specs: Flags) -> None:
    """Add the flags (and positional arguments) of every dataclass in ``specs`` to ``p``."""
    for spec in specs:
        docs = field_docs(spec.cls)
        hints = _hints(spec.cls)
        by_name = {f.name: f for f in spec.fields()}
        for key in (*spec.aliases, *spec.negations, *spec.choices, *spec.parsers, *spec.nargs, *spec.positional,
                    *spec.required, *spec.shown):
            if key not in by_name:
                raise TypeError(f"Flags({spec.cls.__name__}): {key!r} is not a field that gets a flag")
        order = [by_name[n] for n in spec.positional] + [f for f in by_name.values() if f.name not in spec.positional]
        for f in order:
            tp = hints[f.name]
            default = field_default(f)
            help_text = docs.get(f.name, "").replace("%", "%%")  # argparse formats help with %
            choices = spec.choices.get(f.name) or _literal_choices(tp)
            if f.name in spec.positional:
                conv, _ = _converter(spec, f, tp)
                kw: dict[str, Any] = {"type": conv, "help": help_text}
                if choices is not None and not _is_optional(tp):
                    kw["choices"] = choices
                p.add_argument(spec.dest(f.name), **kw)  # a positional argument is always given
                continue
            names = [spec.flag(f.name), *spec.aliases.get(f.name, ())]
            required = default is dataclasses.MISSING or f.name in spec.required
            tail = " (required)" if required else f" (default {spec.shown.get(f.name, _shown(default))})"
            if _strip_optional(tp) is bool:  # bool | None: the default None stays None without the flag
                p.add_argument(*names, dest=spec.dest(f.name), action=argparse.BooleanOptionalAction,
                               default=None if required else default, required=required, help=help_text + tail)
                for neg in spec.negations.get(f.name, ()):
                    p.add_argument(neg, dest=spec.dest(f.name), action="store_false", default=argparse.SUPPRESS,
                                   help=f"same as --no-{(spec.prefix + f.name).replace('_', '-')}")
                continue
            conv, seq = _converter(spec, f, tp)
            kw = {"dest": spec.dest(f.name), "type": conv, "help": help_text + tail, "required": required}
            if not required:
                kw["default"] = default
            if seq:
                kw["nargs"] = spec.nargs[f.name]
            if choices is not None and not _is_optional(tp) and not seq and f.name not in spec.parsers:
                kw["choices"] = choices
            elif choices is not None:
                kw["metavar"] = "{" + ",".join(map(str, choices)) + "}"
            p.add_argument(*names, **kw)


def config_from_args(spec: Flags | type, args: argparse.Namespace, **fixed: Any) -> Any:
    """The dataclass of ``spec`` built from parsed flags (plus ``fixed`` fields, e.g. a nested config).

    Values the dataclass rejects (its ``__post_init__`` or ``validate()`` raising ValueError) become
    a :class:`ConfigError` that names the flag."""
    if not isinstance(spec, Flags):
        spec = Flags(spec)
    hints = _hints(spec.cls)
    kw: dict[str, Any] = {}
    for f in spec.fields():
        if f.name in fixed or not hasattr(args, spec.dest(f.name)):
            continue
        value = getattr(args, spec.dest(f.name))
        origin = typing.get_origin(_strip_optional(hints[f.name]))
        if f.name in spec.nargs and isinstance(value, list) and origin is tuple:
            value = tuple(value)
        kw[f.name] = value
    try:
        obj = spec.cls(**kw, **fixed)
        if spec.validate and callable(getattr(obj, "validate", None)):
            obj = obj.validate() or obj
    except ValueError as e:
        raise ConfigError(_name_flag(spec, str(e))) from None
    return obj


def configs_from_args(args: argparse.Namespace, *specs: Flags) -> tuple[Any, ...]:
    """:func:`config_from_args` of each spec, in order (nested configs: build them one by one)."""
    return tuple(config_from_args(s, args) for s in specs)


def _name_flag(spec: Flags, message: str) -> str:
    """``"n_ctx: expected ..."`` -> ``"--n-ctx (n_ctx): expected ..."`` when it names a field of ``spec``."""
    head, sep, rest = message.partition(":")
    names = {f.name for f in spec.fields()}
    key = head.strip().split(".")[-1]
    if sep and key in names and key not in spec.positional:
        return f"{spec.flag(key)} ({head.strip()}):{rest}"
    return message


def flag_defaults(*specs: Flags) -> dict[str, Any]:
    """{canonical flag: dataclass default} of ``specs`` (what ``--help`` shows; for the tests)."""
    out: dict[str, Any] = {}
    for spec in specs:
        for f in spec.fields():
            out[spec.flag(f.name) if f.name not in spec.positional else spec.dest(f.name)] = field_default(f)
    return out
