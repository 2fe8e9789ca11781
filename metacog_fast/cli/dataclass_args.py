"""Command-line flags of configuration dataclasses, read by ``tyro``: a thin adapter.

tyro makes the flags: one per dataclass field (``--field-name``), its help the docstring under the
field, its default the field's default, its errors naming the flag. A command declares its command
line as one dataclass (``target``) whose fields are the configurations it builds (nested, their
prefixes omitted, so the flags stay flat) and its plain arguments (``out: str``, ...).

What this module adds, and why tyro alone does not do it:

- :func:`view`: the configuration dataclasses belong to the families and know nothing of the
  command line, so the spellings users already type are put on a *view*, a subclass whose fields are
  re-annotated for tyro (``tyro.conf.arg(name=..., aliases=...)``, ``Literal`` choices,
  ``tyro.conf.Positional``, ``tyro.conf.Suppress``), field docstrings still read from the base class.
  tyro has no form for comma lists (``--tasks 0-2,7``), for ``none`` as None, for ``--x`` / ``--no-x``
  on a ``bool | None`` field or for a second flag that sets a bool to False (``--hide-strategic``):
  those are a :class:`tyro.constructors.PrimitiveConstructorSpec` each, or a rewrite of the words.
- :func:`build`: tyro turns a ``ValueError`` of ``__post_init__`` into its own exit; a configuration
  the dataclass rejects must instead be a :class:`ConfigError` naming the flag (``main`` returns 2,
  nothing ran), so a view's ``__post_init__`` is off and :func:`build` makes and validates the base.
- :func:`add_command` / :func:`parse`: ``metacog`` dispatches with argparse (lazy commands) and
  callers hand leaf parsers around as argparse parsers; tyro cannot put its arguments into an
  argparse parser, so the leaf gets one argparse action per tyro spelling that only *collects* the
  words (and ``--help``), and :func:`parse` gives them to ``tyro.cli``. The spellings and word
  counts come from ``tyro.extras.get_parser`` (deprecated in tyro 1.0, used only to list them;
  ``tests/test_cli_flags.py`` checks every legacy spelling, so a tyro that drops it fails there).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import types
import typing
import warnings
from typing import Annotated, Any, Callable, Literal, Mapping, Sequence

__all__ = ["ConfigError", "add_command", "build", "field_default", "parse", "view", "words"]

import tyro
from tyro.constructors import PrimitiveConstructorSpec

from metacog_fast.cli.errors import ConfigError


def field_default(f: dataclasses.Field) -> Any:
    """The default of a dataclass field (``dataclasses.MISSING`` when it has none)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _strip_optional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return tp


def _is_optional(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


_TYPE_WORDS = {int: "an integer", float: "a number", str: "a string"}


def _scalar(tp: Any) -> Callable[[str], Any]:
    """str -> value for int/float/str/Literal; the error says what was expected."""
    choices = typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else None
    base = type(choices[0]) if choices else tp

    def convert(text: str) -> Any:
        try:
            value = base(text)
        except ValueError:
            raise ValueError(f"expected {_TYPE_WORDS[base]}, got {text!r}") from None
        if choices is not None and value not in choices:
            raise ValueError(f"expected one of {', '.join(map(str, choices))}; got {text!r}")
        return value

    return convert


def _shown(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value)) if value else "empty"
    return "none" if value is None else str(value)


def _spec(parse: Callable[[str], Any], metavar: str, shown: str | None) -> PrimitiveConstructorSpec:
    """One word -> value by ``parse`` (a ValueError is tyro's error naming the flag)."""
    return PrimitiveConstructorSpec(
        nargs=1, metavar=metavar, instance_from_str=lambda words: parse(words[0]),
        is_instance=lambda v: True,
        str_from_instance=lambda v: [shown if shown is not None else _shown(v)])


def _word_spec(tp: Any, parser: Callable[[str], Any] | None, shown: str | None) -> PrimitiveConstructorSpec | None:
    """The spec of a field whose words tyro would read otherwise (None: tyro's own)."""
    optional, inner = _is_optional(tp), _strip_optional(tp)
    if parser is not None:
        return _spec(parser, "TEXT", shown)
    origin = typing.get_origin(inner)
    if origin in (tuple, list):
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        item = _scalar(args[0] if args else str)
        container = tuple if origin is tuple else list

        def seq(text: str) -> Any:
            if optional and text.lower() == "none":
                return None
            return container(item(x.strip()) for x in text.split(",") if x.strip())

        return _spec(seq, "A,B,..." + ("|none" if optional else ""), shown)
    if optional and inner is not bool:
        scalar = _scalar(inner)
        choices = typing.get_args(inner) if typing.get_origin(inner) is typing.Literal else None
        metavar = ("{" + ",".join(map(str, choices)) + "}" if choices else getattr(inner, "__name__", "X").upper())
        return _spec(lambda text: None if text.lower() == "none" else scalar(text), metavar + "|none", shown)
    return None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def view(cls: type, *, names: Mapping[str, str] | None = None, aliases: Mapping[str, Sequence[str]] | None = None,
         negations: Mapping[str, Sequence[str]] | None = None, choices: Mapping[str, Sequence[Any]] | None = None,
         parsers: Mapping[str, Callable[[str], Any]] | None = None, shown: Mapping[str, str] | None = None,
         positional: Sequence[str] = (), required: Sequence[str] = (), only: Sequence[str] | None = None,
         skip: Sequence[str] = (), spaced: Sequence[str] = (), nested: Mapping[str, type] | None = None,
         validate: bool = True, checks: Mapping[str, Callable[[Any], Any]] | None = None,
         check: Callable[[Any], Any] | None = None) -> type:
    """A subclass of dataclass ``cls`` re-annotated for tyro (what :func:`build` turns back into ``cls``).

    ``names``: {field: flag name without ``--``} (default the field name in kebab case);
    ``aliases``: {field: more spellings}; ``negations``: {bool field: spellings that set it False};
    ``choices``: {str field: allowed values}; ``parsers``: {field: str -> value} for a syntax of its
    own (``shown``: how its default is written); ``positional``: fields taken as positional arguments;
    ``required``: fields that must be given although they have a default; ``only`` / ``skip``: the
    fields that get a flag (the others keep their default); ``spaced``: tuple fields taking their
    items as separate words (``--checkpoint A B``) instead of a comma list; ``nested``: {field: the
    view of its dataclass}; ``validate``: call the built object's ``validate()``; ``checks``: {field:
    ``fn(value)``}, cheap checks of what a value names on this machine (a path that must exist, an LLM
    URI that must parse: :mod:`metacog_fast.cli.checks`), run by :func:`build` after ``validate()``,
    before the command does any work; ``check``: ``fn(config)`` for a check that reads several fields.
    Either raises ValueError; :func:`build` names the flag."""
    names, aliases, negations = dict(names or {}), dict(aliases or {}), dict(negations or {})
    choices, parsers, shown, nested = dict(choices or {}), dict(parsers or {}), dict(shown or {}), dict(nested or {})
    hints = typing.get_type_hints(cls, include_extras=True)  # keep a field's own tyro annotations
    by_name = {f.name: f for f in dataclasses.fields(cls) if f.init}
    checks = dict(checks or {})
    for key in (*names, *aliases, *negations, *choices, *parsers, *shown, *positional, *required, *skip, *spaced,
                *nested, *checks, *(only or ())):
        if key not in by_name:
            raise TypeError(f"view({cls.__name__}): {key!r} is not a field")
    flags: dict[str, str] = {}
    rewrites: dict[str, list[str]] = {}
    optional_bools: list[str] = []
    fields: list[tuple[str, Any, Any]] = []
    for name, f in by_name.items():
        tp = hints[name]
        if typing.get_origin(tp) is Annotated:  # the field declares its own tyro form: keep it
            if name in skip or (only is not None and name not in only):
                fields.append((name, Annotated[tp, tyro.conf.Suppress], dataclasses.field(default=f.default)))
                continue
            flags[name] = _flag(names.get(name, name))
            arg = tyro.conf.arg(name=names.get(name, name).replace("_", "-"), aliases=tuple(aliases.get(name, ())) or None)
            fields.append((name, Annotated[tp, arg], dataclasses.field(default=f.default) if f.default is not
                           dataclasses.MISSING else dataclasses.field(kw_only=True)))
            continue
        default = field_default(f)
        keep = dataclasses.field(default_factory=f.default_factory) if f.default_factory is not dataclasses.MISSING \
            else dataclasses.field(default=f.default)
        if name in skip or (only is not None and name not in only and name not in nested):
            if default is dataclasses.MISSING:
                raise TypeError(f"view({cls.__name__}): {name!r} has no default, so it needs a flag")
            fields.append((name, Annotated[tp, tyro.conf.Suppress], keep))
            continue
        if name in nested or dataclasses.is_dataclass(_strip_optional(tp)):
            sub = nested.get(name, _strip_optional(tp))
            for k, v in getattr(sub, "__cli_flags__", {}).items():
                flags[f"{name}.{k}"] = v
            rewrites.update(getattr(sub, "__cli_rewrites__", {}))
            fields.append((name, sub, dataclasses.field(default_factory=sub) if default is not dataclasses.MISSING
                           else dataclasses.field()))
            continue
        flag = _flag(names.get(name, name))
        flags[name] = flag
        if name in positional:
            new_tp: Any = tyro.conf.Positional[tp]
            spec = _word_spec(tp, parsers.get(name), shown.get(name))
            if name in choices:
                new_tp = tyro.conf.Positional[Literal[tuple(choices[name])]]  # type: ignore[misc]
            elif spec is not None:
                new_tp = tyro.conf.Positional[Annotated[tp, spec]]
            fields.append((name, new_tp, dataclasses.field() if default is dataclasses.MISSING else keep))
            continue
        arg = tyro.conf.arg(name=names.get(name, name).replace("_", "-"), aliases=tuple(aliases.get(name, ())) or None)
        inner = _strip_optional(tp)
        spec = None if name in spaced else _word_spec(tp, parsers.get(name), shown.get(name))
        if spec is not None:
            new_tp = Annotated[tp, spec, arg]
        elif name in choices:
            lit = Literal[tuple(choices[name])]  # type: ignore[misc]
            new_tp = Annotated[lit | None if _is_optional(tp) else lit, arg]
        else:
            new_tp = Annotated[tp, arg]
        if inner is bool and _is_optional(tp):  # tyro reads {True,False,None}; users type --x / --no-x
            optional_bools.append(flag)
            for spelling in (flag, *aliases.get(name, ())):
                rewrites["--no-" + spelling[2:]] = [flag, "False"]
        for neg in negations.get(name, ()):
            rewrites[neg] = ["--no-" + flag[2:]]
        is_required = default is dataclasses.MISSING or name in required
        fields.append((name, new_tp, dataclasses.field(kw_only=True) if is_required else keep))
    frozen = cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    ns = {"__post_init__": lambda self: None, "__tyro_base__": cls, "__cli_flags__": flags,
          "__cli_rewrites__": rewrites, "__cli_optional_bools__": tuple(optional_bools), "__cli_validate__": validate,
          "__cli_checks__": checks, "__cli_check__": check,
          "__cli_spaced__": tuple(spaced), "__cli_positional__": tuple(positional),
          "__doc__": cls.__doc__, "__module__": cls.__module__}
    return dataclasses.make_dataclass(cls.__name__, fields, bases=(cls,), namespace=ns, frozen=frozen)


def _name_flag(view_cls: type, message: str) -> str:
    """``"n_ctx: expected ..."`` -> ``"--n-ctx (n_ctx): expected ..."`` when it names a field."""
    head, sep, rest = message.partition(":")
    key = head.strip()
    flags = getattr(view_cls, "__cli_flags__", {})
    if not sep:
        return message
    if key not in flags:
        key = key.split(".")[-1] if key.split(".")[-1] in flags else next(
            (k for k in flags if k.endswith("." + key.split(".")[-1])), "")
    return f"{flags[key]} ({head.strip()}):{rest}" if key in flags else message


def build(obj: Any, **fixed: Any) -> Any:
    """The base configuration of a view instance (nested views too), validated: a ValueError of its
    ``__post_init__`` or ``validate()`` becomes a :class:`ConfigError` naming the flag."""
    view_cls = type(obj)
    base = getattr(view_cls, "__tyro_base__", None)
    if base is None:
        return obj
    kw = {f.name: getattr(obj, f.name) for f in dataclasses.fields(base) if f.init}
    for k, v in kw.items():
        if dataclasses.is_dataclass(v) and hasattr(type(v), "__tyro_base__"):
            kw[k] = build(v)
    kw.update(fixed)
    try:
        out = base(**kw)
        if view_cls.__cli_validate__ and callable(getattr(out, "validate", None)):
            out = out.validate() or out
        for name, fn in view_cls.__cli_checks__.items():
            try:
                fn(getattr(out, name))
            except ValueError as e:
                raise ValueError(f"{name}: {e}") from None
        if view_cls.__cli_check__ is not None:
            view_cls.__cli_check__(out)
    except ValueError as e:
        raise ConfigError(_name_flag(view_cls, str(e))) from None
    return out


# ------------------------------------------------------------------------- the argparse side

def _rewrites(target: type) -> dict[str, list[str]]:
    out: dict[str, list[str]] = dict(getattr(target, "__cli_rewrites__", {}))
    for f in dataclasses.fields(target):
        tp = f.type if not isinstance(f.type, str) else typing.get_type_hints(target)[f.name]
        if dataclasses.is_dataclass(tp):
            out.update(_rewrites(tp))
    return out


def _optional_bools(target: type) -> set[str]:
    out = set(getattr(target, "__cli_optional_bools__", ()))
    for f in dataclasses.fields(target):
        tp = f.type if not isinstance(f.type, str) else typing.get_type_hints(target)[f.name]
        if dataclasses.is_dataclass(tp):
            out |= _optional_bools(tp)
    return out


def _tyro_target(target: type) -> Any:
    return tyro.conf.OmitArgPrefixes[target]  # nested configurations: flat flags


class _Collect(argparse.Action):
    """Keeps the words of one flag (or positional argument) for tyro, in the order given."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        words = list(getattr(namespace, "cli_words", None) or [])
        vals = [] if values is None else [values] if isinstance(values, str) else list(values)
        words.append([option_string or "", *vals])
        namespace.cli_words = words


@functools.lru_cache(maxsize=None)
def spellings(target: type) -> tuple[tuple[tuple[str, ...], Any, str], ...]:
    """[(option strings or () for a positional, argparse nargs, metavar)] of tyro's command line for ``target``.

    Cached per class: tyro builds a whole parser to answer (~50 ms), and a process that builds the
    command tree more than once (tests, an embedding application) would pay it every time."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = tyro.extras.get_parser(_tyro_target(target), add_help=False)
    out = []
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            continue
        out.append((tuple(a.option_strings), a.nargs, a.dest))
    return tuple(out)


def add_command(p: argparse.ArgumentParser, target: type) -> None:
    """Make ``p`` read ``target``'s command line: its words are collected here and parsed by tyro in
    :func:`parse`; ``--help`` is tyro's help (field docstrings, defaults)."""
    for action in list(p._actions):  # tyro's --help replaces argparse's
        if isinstance(action, argparse._HelpAction):
            p._handle_conflict_resolve(action, [(s, action) for s in action.option_strings])
    known: set[str] = set()
    for options, nargs, dest in spellings(target):
        if not options:  # a positional argument: optional here, tyro says when one is missing
            p.add_argument(f"cli_pos_{dest}", nargs="*" if nargs in ("*", "+") else "?", action=_Collect,
                           default=argparse.SUPPRESS, metavar=dest.split(".")[-1].upper())
            continue
        optional_bools = _optional_bools(target)
        n = "?" if set(options) & optional_bools else 0 if nargs == 0 else nargs
        p.add_argument(*options, nargs=n, action=_Collect, dest="cli_words", default=None, help=argparse.SUPPRESS)
        known |= set(options)
    for extra in _rewrites(target):
        if extra not in known:
            p.add_argument(extra, nargs=0, action=_Collect, dest="cli_words", default=None, help=argparse.SUPPRESS)
            known.add(extra)
    p.add_argument("-h", "--help", nargs=0, action=_Collect, dest="cli_words", default=None,
                   help="show this help message and exit")
    known |= {"-h", "--help"}
    p.cli_spellings = known  # type: ignore[attr-defined]  # read by main's subcommand action
    p.set_defaults(cli_target=target, cli_prog=p.prog, cli_words=None)


def words(a: argparse.Namespace, target: type) -> list[str]:
    """The words given for ``target``, as tyro reads them (legacy spellings rewritten)."""
    rewrites, optional_bools = _rewrites(target), _optional_bools(target)
    out: list[str] = []
    for group in getattr(a, "cli_words", None) or []:
        head, vals = group[0], group[1:]
        if not head:
            out += vals
        elif head in rewrites:
            out += rewrites[head]
        elif head in optional_bools:
            out += [head, vals[0] if vals else "True"]
        else:
            out += [head, *vals]
    return out


def parse(a: argparse.Namespace, target: type | None = None) -> Any:
    """The ``target`` instance (default: the command's) that tyro reads from the collected words;
    a bad value is tyro's error naming the flag (exit code 2), ``--help`` its help (exit code 0)."""
    target = target or a.cli_target
    cache = a.__dict__.setdefault("_cli_parsed", {})
    if target not in cache:
        cache[target] = tyro.cli(_tyro_target(target), args=words(a, target),
                                 prog=getattr(a, "cli_prog", None) or "metacog", description=target.__doc__)
    return cache[target]
