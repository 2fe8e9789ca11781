"""Entry point of the ``metacog`` command (also ``python -m metacog_fast``)."""
from __future__ import annotations

import argparse
import sys

from metacog_fast.cli import demo, info


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="metacog", description="metacog_fast: metacognitive agents, fast.")
    sub = p.add_subparsers(dest="command", required=True, metavar="{info,demo}")
    p_info = sub.add_parser("info", help="backends, versions, and which environments/data are usable")
    info.add_arguments(p_info)
    p_info.set_defaults(func=info.run)
    p_demo = sub.add_parser("demo", help="drive each environment end to end with its expert; write figures as JSON")
    demo.add_arguments(p_demo)
    p_demo.set_defaults(func=demo.run)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
