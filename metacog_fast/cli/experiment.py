"""``metacog experiment run|list|show`` (:mod:`metacog_fast.runs.experiment`) and ``metacog serve
start|stop`` (:mod:`metacog_fast.llm.serve`, the loopback server an experiment can start and stop).

NAME is ``experiments/NAME.toml`` of the current directory, then of the repository root beside the
package, or a path to a ``.toml``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import sys
from dataclasses import dataclass

from metacog_fast.cli.dataclass_args import ConfigError, add_command, build, parse, view


@dataclass
class ExperimentRunConfig:
    """What ``metacog experiment run`` does with an experiment."""

    name: str
    """experiment name (experiments/NAME.toml) or path to a .toml file"""
    set: tuple[str, ...] = ()
    """override variables of the file's [vars]: VAR=VALUE (repeatable words: --set a=1 b=2)"""
    dry_run: bool = False
    """print every step's command (and whether it is finished) without running anything"""
    only: tuple[str, ...] = ()
    """run only these steps (comma-separated names), still skipping those finished"""
    start: str | None = None
    """run from this step on (the steps before it are not looked at)"""
    redo: tuple[str, ...] = ()
    """run these steps (comma-separated) even if recorded as finished (their commands resume)"""
    list: bool = False
    """list the steps with their state and stop"""
    workers: int | None = None
    """at most this many steps of one parallel group at a time (default: one per core)"""

    def validate(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers: expected at least 1, got {self.workers}")


@dataclass
class ExperimentShowConfig:
    """What ``metacog experiment show`` prints."""

    name: str
    """experiment name (experiments/NAME.toml) or path to a .toml file"""
    set: tuple[str, ...] = ()
    """override variables of the file's [vars]: VAR=VALUE"""
    check: bool = False
    """also parse every step's command with the metacog parser (imports each command's modules)"""


@dataclass
class ServeConfig:
    """``metacog serve``: llama-cpp-python's OpenAI-compatible server on 127.0.0.1."""

    action: str
    """start: start it and wait until /v1/models answers; stop: stop the server that start started"""
    port: int = 8765
    """loopback port"""
    threads: int = 1
    """llama.cpp threads (generation and batch)"""
    gguf: str | None = None
    """GGUF to serve (default: the embedded backend's SmolLM2-135M-Instruct Q4_1)"""
    wait_s: float = 120.0
    """start: seconds to wait for the server to answer"""


RUN_VIEW = view(ExperimentRunConfig, positional=("name",), spaced=("set",), aliases={"start": ("--from",)})
SHOW_VIEW = view(ExperimentShowConfig, positional=("name",), spaced=("set",))
SERVE_VIEW = view(ServeConfig, positional=("action",), choices={"action": ("start", "stop")})


def _load(name: str, sets: tuple[str, ...]):
    from metacog_fast.runs import experiment as ex

    try:
        return ex.load(ex.find(name), ex.parse_sets(sets))
    except ex.ExperimentError as e:
        raise ConfigError(str(e)) from None


def _run(a: argparse.Namespace) -> int:
    from metacog_fast.runs import experiment as ex

    cfg = build(parse(a, RUN_VIEW))
    exp = _load(cfg.name, cfg.set)
    if cfg.list:
        progress = ex.Progress.read(exp.run_folder / "experiment.json")
        for s in exp.steps:
            state = "finished" if ex.is_done(s, progress, exp.root) else "to run"
            print(f"{s.name:28s} {s.kind:9s} {state}" + (f"  (parallel {s.parallel})" if s.parallel else "")
                  + ("  (manual: --only it)" if s.manual else ""))
        return 0
    try:
        failed = ex.run(exp, only=cfg.only, start=cfg.start, redo=cfg.redo, dry_run=cfg.dry_run, workers=cfg.workers)
    except ex.ExperimentError as e:
        raise ConfigError(str(e)) from None
    except ex.StepFailed as e:
        print(f"metacog experiment run {exp.name}: {e}", file=sys.stderr)
        return 1
    if not cfg.dry_run:
        print(f"{exp.name}: {'all steps finished' if not failed else f'{failed} step(s) failed'} "
              f"(record: {exp.run_folder / 'experiment.json'})")
    return 1 if failed else 0


def _list(a: argparse.Namespace) -> int:
    from metacog_fast.runs import experiment as ex

    seen: set[str] = set()
    for folder in ex.search_folders():
        for path in sorted(folder.glob("*.toml")):
            if path.stem in seen:
                continue
            seen.add(path.stem)
            try:
                first = ex.load(path).title
            except ex.ExperimentError as e:
                first = f"(does not load: {e})"
            print(f"{path.stem:28s} {first}")
    if not seen:
        print("no experiments found", file=sys.stderr)
        return 1
    return 0


def _show(a: argparse.Namespace) -> int:
    cfg = build(parse(a, SHOW_VIEW))
    exp = _load(cfg.name, cfg.set)
    print(f"{exp.name}: {exp.title}  ({exp.path})\n\n{exp.description}\n")
    print(f"run folder: {exp.folder} (in {exp.root})")
    for title, items in (("inputs", exp.inputs), ("outputs", exp.outputs)):
        if items:
            print(f"{title}:\n" + "\n".join(f"  {x}" for x in items))
    print("variables (--set VAR=VALUE):\n" + "\n".join(f"  {k} = {v}" for k, v in exp.vars.items()
                                                      if k not in ("name", "folder", "root")))
    print("steps:")
    for s in exp.steps:
        extra = "".join([f" needs {','.join(s.needs)};" if s.needs else "",
                         f" parallel {s.parallel};" if s.parallel else ""])
        print(f"  {s.name}:{extra} {s.command()}")
    if cfg.check:
        bad = check_commands(exp)
        for step, msg in bad.items():
            print(f"step {step!r}: {msg}", file=sys.stderr)
        print("every command parses" if not bad else f"{len(bad)} command(s) do not parse")
        return 1 if bad else 0
    return 0


def check_commands(exp) -> dict[str, str]:
    """{step: why its ``metacog`` command does not parse} for the experiment's metacog steps (the
    parsers are built, nothing runs)."""
    from metacog_fast.cli.commands import top_level
    from metacog_fast.cli.main import build_parser

    bad: dict[str, str] = {}
    for s in exp.steps:
        if s.kind != "metacog":
            continue
        if s.argv[0] not in top_level():
            bad[s.name] = f"{s.argv[0]!r} is not a metacog command"
            continue
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                a = build_parser(load=s.argv[0]).parse_args(list(s.argv))
                if getattr(a, "cli_target", None) is not None:  # a tyro command: its words are read here
                    parse(a)
        except Exception as e:  # a command whose modules do not load
            bad[s.name] = f"its parser does not build: {type(e).__name__}: {e}"
        except SystemExit as e:
            if e.code:
                bad[s.name] = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {e.code}"
    return bad


def _serve(a: argparse.Namespace) -> int:
    from metacog_fast.llm import serve

    cfg = build(parse(a, SERVE_VIEW))
    if cfg.action == "start":
        try:
            print(serve.start(cfg.port, cfg.threads, cfg.gguf, cfg.wait_s))
        except serve.ServeError as e:
            print(f"metacog serve start: {e}", file=sys.stderr)
            return 1
    else:
        print(serve.stop(cfg.port))
    return 0


def attach(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog experiment`` (:mod:`metacog_fast.cli.commands`)."""
    sub = p.add_subparsers(dest="experiment_cmd", required=True, metavar="{run,list,show}")
    r = sub.add_parser("run", help="run an experiment's steps in order; a rerun resumes at the first unfinished step")
    add_command(r, RUN_VIEW)
    r.set_defaults(func=_run)
    ls = sub.add_parser("list", help="the experiments and what each measures")
    ls.set_defaults(func=_list)
    s = sub.add_parser("show", help="an experiment's description, inputs, outputs, variables and steps")
    add_command(s, SHOW_VIEW)
    s.set_defaults(func=_show)


def attach_serve(p: argparse.ArgumentParser) -> None:
    """Fills ``metacog serve``."""
    add_command(p, SERVE_VIEW)
    p.set_defaults(func=_serve)
