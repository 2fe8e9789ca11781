"""Entry point of the ``metacog`` command (also ``python -m metacog_fast``).

``info`` and ``demo`` live here; commands contributed by other modules (``sim``, ``train``,
``adapt``; :mod:`metacog_fast.cli.commands`) are imported only when chosen.
"""
from __future__ import annotations

import argparse
import sys

from metacog_fast.cli import demo, info
from metacog_fast.cli.commands import EXTERNAL_COMMANDS


def build_parser(load: str | None = None) -> argparse.ArgumentParser:
    """The ``metacog`` parser; ``load`` = the external command whose module to import (if any)."""
    p = argparse.ArgumentParser(prog="metacog", description="metacog_fast: metacognitive agents, fast.")
    names = ["info", "demo", *EXTERNAL_COMMANDS]
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(names) + "}")
    p_info = sub.add_parser("info", help="backends, versions, and which environments/data are usable")
    info.add_arguments(p_info)
    p_info.set_defaults(func=info.run)
    p_demo = sub.add_parser("demo", help="drive each environment end to end with its expert; write figures as JSON")
    demo.add_arguments(p_demo)
    p_demo.set_defaults(func=demo.run)
    for name, cmd in EXTERNAL_COMMANDS.items():
        if name == load:
            cmd.load()(sub)
        else:
            sub.add_parser(name, help=cmd.help)  # stand-in: listed in --help, the real parser is loaded when chosen
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    args = build_parser(load=chosen if chosen in EXTERNAL_COMMANDS else None).parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
