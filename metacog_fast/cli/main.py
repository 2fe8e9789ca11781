"""Entry point of the ``metacog`` command (also ``python -m metacog_fast``).

Every command is a line of :data:`metacog_fast.cli.commands.COMMANDS`; only the chosen one's
modules are imported, so ``metacog --help``, ``info`` and ``demo`` stay fast.
"""
from __future__ import annotations

import argparse
import sys

from metacog_fast.cli.commands import attach, top_level
from metacog_fast.cli.dataclass_args import ConfigError


def build_parser(load: str | None = None) -> argparse.ArgumentParser:
    """The ``metacog`` parser; ``load`` = the first word whose command(s) to build in full (if any)."""
    p = argparse.ArgumentParser(prog="metacog", description="metacog_fast: metacognitive agents, fast.")
    words = top_level()
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(words) + "}")
    for word, help_line in words.items():
        if word == load:
            attach(sub, word)
        else:
            sub.add_parser(word, help=help_line)  # stand-in: listed in --help, the real parser is loaded when chosen
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(load=chosen if chosen in top_level() else None)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ConfigError, FileNotFoundError) as e:  # bad input: an argparse-style error naming the argument
        print(f"{parser.prog} {' '.join(argv[:1])}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
