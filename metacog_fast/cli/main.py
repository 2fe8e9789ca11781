"""Entry point of the ``metacog`` command (also ``python -m metacog_fast``).

Every command is a line of :data:`metacog_fast.cli.commands.COMMANDS`; only the chosen one's
modules are imported, so ``metacog --help``, ``info`` and ``demo`` stay fast. argparse dispatches
to the command; the command's flags are read by tyro from its dataclasses
(:mod:`metacog_fast.cli.dataclass_args`).
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from metacog_fast.cli.commands import attach, top_level
from metacog_fast.cli.errors import ConfigError


class _SubcommandKeepsParentFlags(argparse._SubParsersAction):
    """argparse copies every value of a subcommand's namespace over its parent's, so a flag that
    both define, given before the subcommand (``metacog sim --agents 3 ablate``), was silently
    replaced by the subcommand's default. Here a value the user gave before the subcommand is kept
    unless the subcommand's own flags set it again."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[override]
        given = {k: v for k, v in vars(namespace).items() if v != parser.get_default(k) and k != "cli_words"}
        words = getattr(namespace, "cli_words", None) or []
        super().__call__(parser, namespace, values, option_string)
        chosen = self._name_parser_map.get(values[0])
        if chosen is None:
            return
        for k, v in given.items():
            if getattr(namespace, k, None) == chosen.get_default(k):
                setattr(namespace, k, v)
        # the words collected for tyro (dataclass_args.add_command): those the subcommand reads too
        # come first, so that the subcommand's own win
        known = getattr(chosen, "cli_spellings", set())
        kept = [w for w in words if w[0] in known and w[0] not in ("-h", "--help")]
        if kept:
            namespace.cli_words = kept + list(getattr(namespace, "cli_words", None) or [])


class MetacogParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose subcommands keep the flags given before them (every parser of
    ``metacog`` is one: ``add_subparsers`` makes its children of the parent's class)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _SubcommandKeepsParentFlags)


def build_parser(load: str | None = None) -> argparse.ArgumentParser:
    """The ``metacog`` parser; ``load`` = the first word whose command(s) to build in full (if any)."""
    p = MetacogParser(prog="metacog", description="metacog_fast: metacognitive agents, fast.")
    words = top_level()
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(words) + "}")
    for word, help_line in words.items():
        if word == load:
            attach(sub, word)
        else:
            sub.add_parser(word, help=help_line)  # stand-in: listed in --help, the real parser is loaded when chosen
    return p


def exit_on_sigterm() -> None:
    """Make SIGTERM (``kill PID``) raise SystemExit(143) in this process, so that the ``finally``
    blocks and context managers of a long command run: a pool of worker processes is terminated with
    its driver instead of playing its shards on, orphaned. Python's default ends the process alone."""
    def _raise(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)


def main(argv: list[str] | None = None) -> int:
    exit_on_sigterm()
    argv = sys.argv[1:] if argv is None else list(argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(load=chosen if chosen in top_level() else None)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ConfigError, FileNotFoundError) as e:  # bad input: an argparse-style error naming the argument
        return _usage_error(parser, args, argv, e)
    except ValueError as e:
        from metacog_fast.runs.folder import RunFolderMismatch

        if not isinstance(e, RunFolderMismatch):
            raise
        return _usage_error(parser, args, argv, e)  # --out names a folder of another run


def _usage_error(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str], e: Exception) -> int:
    """Print ``metacog <command>: error: <message>`` on one line (argparse's form) and return 2."""
    prog = getattr(args, "cli_prog", None) or f"{parser.prog} {' '.join(argv[:1])}"
    print(f"{prog}: error: {' '.join(str(e).split())}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
