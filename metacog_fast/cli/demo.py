"""``metacog demo``: run the registered demo parts end to end, print a summary, write JSON.

Output (``--out``, default ``runs/demo/demo.json``, written atomically):
``{"created", "metacog_fast", "argv", "seed", "parts": {name: figures | {"error": ...} | {"skipped": why}},
"wall_seconds"}``, and beside it ``report.html`` (:mod:`metacog_fast.cli.demo_report`). A part whose environment is not usable here (``metacog info`` says why, e.g. no
ALFWorld games) is skipped with that reason; skipping is not a failure, so the exit code stays 0.

The command line is the composition of :class:`DemoOptions` and each part's options dataclass
(``DemoPart.options``), read by tyro: ``--alfworld-games 6`` is field ``games`` of the ``alfworld`` part.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import importlib
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import tyro

from metacog_fast.cli.dataclass_args import add_command, build, parse, view

from metacog_fast.cli.demo_registry import DEMO_PARTS, DemoPart
from metacog_fast.cli.io import write_json_atomic
from metacog_fast.envs.base import EnvSetupError

# Modules that register demo parts on import; later issues append theirs here.
PART_MODULES = ("metacog_fast.metaworld.demo", "metacog_fast.alfworld.demo",
                "metacog_fast.scienceworld.demo", "metacog_fast.town.demo")


def load_parts() -> None:
    """Import the families' demo modules (each registers its parts), then order the parts: every
    environment check (the ``quick`` parts) before any agent, each group in :data:`PART_MODULES` order."""
    for mod in PART_MODULES:
        importlib.import_module(mod)
    ordered = sorted(DEMO_PARTS.values(), key=lambda part: not part.quick)
    DEMO_PARTS.clear()
    DEMO_PARTS.update((part.name, part) for part in ordered)


@dataclass
class DemoOptions:
    """What every part shares: which parts, where the JSON goes, the seed."""

    parts: Annotated[str, tyro.conf.arg(aliases=("--envs",))] = ""
    """Comma-separated parts to run (default: every part run by default)."""
    quick: bool = False
    """Only the environment checks (under a minute)."""
    out: str = "runs/demo/demo.json"
    """JSON output path."""
    seed: int = 0
    """Seed for the environments."""
    progress: bool = True
    """Progress bars."""


def demo_command() -> type:
    """The command line of ``metacog demo``: :class:`DemoOptions` and every part's options
    (:attr:`DemoPart.options`), the fields of part ``name`` spelled ``--<name>-<field>``."""
    load_parts()
    defaults = ",".join(n for n, part in DEMO_PARTS.items() if part.default)
    quick = ",".join(n for n, part in DEMO_PARTS.items() if part.quick)
    shared = view(DemoOptions)
    fields: list[tuple[str, Any, Any]] = [("demo", shared, dataclasses.field(default_factory=shared))]
    for name, part in DEMO_PARTS.items():
        opts = view(part.options, names={f.name: f"{name}_{f.name}" for f in dataclasses.fields(part.options)})
        fields.append((name, opts, dataclasses.field(default_factory=opts)))
    doc = (f"Drive each environment end to end with its expert, then the agents; write figures as JSON. "
           f"Parts: {', '.join(f'{n} ({p.help})' for n, p in DEMO_PARTS.items())}. "
           f"Default --parts {defaults}; --quick: {quick}.")
    return dataclasses.make_dataclass("DemoCommand", fields, namespace={"__doc__": doc})


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_command(p, demo_command())


def options(args: argparse.Namespace) -> argparse.Namespace:
    """The demo's options, flat as the parts read them: ``parts``, ``quick``, ``out``, ``seed``,
    ``no_progress`` and ``<part>_<field>`` for every part's field."""
    cmd = parse(args)
    shared = build(cmd.demo)
    flat = argparse.Namespace(parts=shared.parts or ",".join(n for n, part in DEMO_PARTS.items() if part.default),
                              quick=shared.quick, out=shared.out, seed=shared.seed, no_progress=not shared.progress)
    for name in DEMO_PARTS:
        for f in dataclasses.fields(getattr(cmd, name)):
            setattr(flat, f"{name}_{f.name}", getattr(getattr(cmd, name), f.name))
    return flat


def _progress_factory(enabled: bool) -> Any:
    from tqdm import tqdm

    def make(total: int, desc: str) -> Any:
        return tqdm(total=total, desc=desc, disable=not enabled, file=sys.stderr, leave=True, dynamic_ncols=True)

    return make


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _print_summary(results: dict[str, dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="metacog demo", show_header=True)
    for col in ("part", "episodes", "success", "steps/s", "reset s", "wall s", "model", "note"):
        t.add_column(col, justify="right" if col not in ("part", "model", "note") else "left")
    for name, r in results.items():
        if "skipped" in r:
            t.add_row(name, "-", "-", "-", "-", "-", "-", f"[yellow]skipped: {r['skipped'].split(':')[0]}[/yellow]")
            continue
        if "error" in r:
            t.add_row(name, "-", "-", "-", "-", "-", "-", f"[red]{r['error']}[/red]")
            continue
        note = ""
        if "cached_reset_seconds" in r:
            note = f"cached reset {r['cached_reset_seconds']:.3f} s vs first {r['first_reset_seconds_mean']:.3f} s"
        elif "mean_score" in r:
            note = f"mean score {r['mean_score']:.1f}"
        elif "decisions_per_second" in r:
            note = f"{r['decisions_per_second']:.1f} decisions/s ({r.get('backend')} backend)"
        if r.get("summary"):
            note = r["summary"]
        model = r.get("model") or {}
        kind = model.get("kind", "")
        model_cell = f"[yellow]{kind}[/yellow]" if kind == "untrained" else kind
        success = r.get("success_rate")
        t.add_row(
            name,
            _fmt(r.get("n_episodes"), "d"),
            "-" if success is None else ("[yellow]n/a: untrained[/yellow]" if kind == "untrained" else f"{100 * success:.0f} %"),
            _fmt(r.get("steps_per_second"), ".1f"),
            _fmt(r.get("mean_reset_seconds"), ".3f"),
            _fmt(r.get("wall_seconds"), ".1f"),
            model_cell,
            note,
        )
    con = Console(width=None if sys.stdout.isatty() else 160)
    con.print(t)
    for name, r in results.items():
        m = r.get("model") or {}
        if m.get("name"):
            con.print(f"[bold]{name}[/bold]: {m['name']} ({m.get('kind')}){': ' + m['note'] if m.get('note') else ''}")
    for why in dict.fromkeys(r["skipped"] for r in results.values() if "skipped" in r):
        names = ", ".join(n for n, r in results.items() if r.get("skipped") == why)
        con.print(f"[yellow]skipped[/yellow] ({names}): {escape(why)}")


def _unusable(part: DemoPart, probed: dict[str, Any]) -> str | None:
    """Why ``part`` cannot run here (the first unusable environment it needs), or None."""
    from metacog_fast.envs import probe_envs

    for env in part.needs:
        if env not in probed:
            probed[env] = probe_envs(names=[env])[0]
        if not probed[env].usable:
            return f"{env} is not usable here: {probed[env].reason}"
    return None


def run(args: argparse.Namespace) -> int:
    import metacog_fast

    load_parts()
    args = options(args)
    names = [n.strip() for n in args.parts.split(",") if n.strip()]
    if getattr(args, "quick", False):  # the environment checks, whatever --parts says
        names = [n for n, part in DEMO_PARTS.items() if part.quick]
    unknown = [n for n in names if n not in DEMO_PARTS]
    if unknown or not names:
        print(f"metacog demo: --parts: unknown {unknown or names}; available: {', '.join(DEMO_PARTS)}", file=sys.stderr)
        return 2
    progress = _progress_factory(not args.no_progress)
    argv = list(sys.argv)  # textworld's PDDL translation overwrites sys.argv
    t0 = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    failed = False
    probed: dict[str, Any] = {}
    for name in names:
        why = _unusable(DEMO_PARTS[name], probed)
        if why is not None:
            results[name] = {"skipped": why}
            print(f"[demo] {name} skipped: {why}", file=sys.stderr)
            continue
        try:
            results[name] = DEMO_PARTS[name].run(args, progress)
        except (EnvSetupError, ValueError) as exc:
            results[name] = {"error": str(exc)}
            failed = True
        except Exception as exc:  # one broken part must not lose the others' figures
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
            failed = True
    report = {
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "metacog_fast": metacog_fast.__version__,
        "argv": argv,
        "seed": args.seed,
        "parts": results,
        "wall_seconds": time.perf_counter() - t0,
    }
    out = write_json_atomic(args.out, report)
    from metacog_fast.cli.demo_report import write_report

    page = write_report(report, Path(args.out).with_name("report.html"))
    _print_summary(results)
    print(f"wrote {out}")
    print(f"report: {page.resolve()}")
    return 1 if failed else 0
