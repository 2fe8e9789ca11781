"""Experiments as data: ``experiments/<name>.toml`` read, checked and run step by step with resume.

An experiment file (format in ``docs/runs.md``, "Experiments")::

    [experiment]
    title = "one line: what it measures"
    description = "what it measures and where the doc's numbers come from"
    folder = "runs/${name}"          # run folder: experiment.json and logs/<step>.log (default runs/<name>)
    inputs = ["results/..."]         # what it reads (documentation; listed by `experiment show`)
    outputs = ["results/..."]        # what it writes that the docs cite

    [vars]                           # ${var} in any string below; `--set var=value` overrides
                                     # (built in: ${name}, ${root} = where steps run, ${folder})
    actor = "finetuned:alfworld"

    [[steps]]
    name = "eval"
    run = "finetune eval --llm ${actor} --out runs/x"   # metacog argv: a string (shlex) or a list
    needs = ["data"]                 # earlier steps that must be finished first
    done_when = ["runs/x/summary.json"]  # paths whose existence marks the step finished
    parallel = "collect"             # consecutive steps of one group run side by side, one per core
    env = { OMP_NUM_THREADS = "1" }
    stdout = "runs/x/compare.json"   # the command's standard output, written atomically there
    continue_on_error = false        # a failure is logged and the experiment goes on
    always = false                   # true: run on every call even when finished (a report)
    manual = false                   # true: run only when named with --only
    when_exists = "runs/x/config.json"  # passed over while this path does not exist
    unpack = { archive = "results/r.tar.gz", into = "runs/x", unless_exists = "runs/x/a" }
    pack = { archive = "results/r.tar.gz", root = "runs/x", paths = ["a/config.json", "a/episodes"],
             every_s = 900 }         # packed every every_s while it runs and after it ends (even failed)

Step kinds besides the default ``metacog``: ``unpack`` (a tar.gz of committed records into a folder,
where that folder lacks them), ``pack`` (paths under a root into a tar.gz, atomically), ``copy``
(files into a folder, atomically), ``git-show`` (files of an old revision of the repository, e.g. an
adapter that shipped once) and ``call`` (a ``"module:function"`` of the package given the step's
``args``, for a table computed from records). Nothing runs through a shell.

The runner plays the steps in order as ``sys.executable -m metacog_fast ARGV`` in the experiment's
root (the folder that holds ``experiments/``), logs each to ``<folder>/logs/<step>.log``, and records
each finished step in ``<folder>/experiment.json`` (atomic rewrite) with a fingerprint of what it
ran: a rerun after a kill skips the finished steps and starts at the first unfinished one (whose
command resumes by itself); a step whose resolved command changed (``--set``) runs again.
"""
from __future__ import annotations

import glob
import gzip
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TextIO

from metacog_fast._atomic import atomic_open, atomic_tmp_path
from metacog_fast._registry import resolve
from metacog_fast.runs.records import read_json, write_json_atomic

KINDS = ("metacog", "unpack", "pack", "copy", "git-show", "call")
"""Step kinds; ``metacog`` (the default) runs a ``metacog`` command."""

_VAR = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


class ExperimentError(ValueError):
    """A malformed experiment file or a bad request; the message names the file, the step and the field."""


@dataclass(frozen=True)
class Pack:
    """Paths under ``root`` (globs; those missing are left out) packed into ``archive`` (tar.gz, atomic)."""

    archive: str
    root: str
    paths: tuple[str, ...]
    only_if: str | None = None
    """A file name: a path matched by a wildcard pattern is packed only when its folder holds this
    file (finished runs only, e.g. ``summary.json``)."""
    every_s: float | None = None
    """As a step's ``pack``: also packed every this many seconds while its command runs."""


@dataclass(frozen=True)
class Unpack:
    """``archive`` (tar.gz) unpacked into ``into`` unless ``unless_exists`` exists; a missing archive
    is nothing to unpack when ``missing_ok`` (a fresh experiment has no committed records yet)."""

    archive: str
    into: str
    unless_exists: str | None = None
    missing_ok: bool = True


@dataclass(frozen=True)
class Step:
    """One step of an experiment, its ``${var}`` already substituted."""

    name: str
    kind: str = "metacog"
    argv: tuple[str, ...] = ()
    """``metacog`` argv (without ``metacog``), kind ``metacog``."""
    needs: tuple[str, ...] = ()
    done_when: tuple[str, ...] = ()
    parallel: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    stdout: str | None = None
    continue_on_error: bool = False
    manual: bool = False
    """Run only when named with ``--only`` (a measurement beyond the default set)."""
    when_exists: str | None = None
    """A path: the step is passed over (not recorded) while it does not exist."""
    always: bool = False
    """Run on every call, finished or not (a report over whatever records exist; the other kinds
    than ``metacog`` always are: they are cheap and idempotent)."""
    unpack: Unpack | None = None
    pack: Pack | None = None
    files: tuple[str, ...] = ()
    """``copy``: the files to copy; ``git-show``: repository paths."""
    targets: tuple[str, ...] = ()
    """``copy`` given a table ``{source = "target path"}``: each file's own target (then no ``into``)."""
    into: str | None = None
    """``copy`` / ``git-show``: destination folder."""
    revision: str | None = None
    """``git-show``: the revision (commit) to read the files from."""
    function: str | None = None
    """``call``: ``"module:function"``, called as ``function(*args)``."""
    args: tuple[str, ...] = ()

    def command(self) -> str:
        """The step as one line (what ``--dry-run`` prints)."""
        if self.kind == "metacog":
            line = shlex.join(["metacog", *self.argv])
            if self.stdout:
                line += f" > {shlex.quote(self.stdout)}"
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
            extra = ""
            if self.unpack:
                extra += f"  [unpack {self.unpack.archive} -> {self.unpack.into} first]"
            if self.pack:
                extra += f"  [pack -> {self.pack.archive}" + (
                    f" every {self.pack.every_s:g} s" if self.pack.every_s else "") + " and at the end]"
            return (env + " " if env else "") + line + extra
        if self.kind == "unpack":
            u = self.unpack
            return f"unpack {u.archive} -> {u.into}" + (f" (unless {u.unless_exists} exists)" if u.unless_exists else "")
        if self.kind == "pack":
            return f"pack {self.pack.root}/{{{','.join(self.pack.paths)}}} -> {self.pack.archive}"
        if self.kind == "copy" and self.targets:
            return "copy " + ", ".join(f"{a} -> {b}" for a, b in zip(self.files, self.targets))
        if self.kind == "copy":
            return f"copy {' '.join(self.files)} -> {self.into}/"
        if self.kind == "git-show":
            return f"git-show {self.revision}:{{{','.join(self.files)}}} -> {self.into}/"
        return f"call {self.function}({', '.join(map(repr, self.args))})"

    def fingerprint(self) -> str:
        """What the step runs, hashed: a recorded step whose fingerprint changed is not finished."""
        keep = {k: v for k, v in self.__dict__.items() if k not in ("name", "needs", "parallel",
                                                                   "continue_on_error", "done_when", "manual",
                                                                   "always", "when_exists")}
        text = json.dumps(keep, sort_keys=True, default=lambda o: o.__dict__)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Experiment:
    """A loaded experiment: its steps in order, variables substituted."""

    name: str
    path: Path
    root: Path
    """Where its steps run: the folder holding ``experiments/`` (or the file's own folder)."""
    description: str
    title: str
    """One line: what it measures (``metacog experiment list``)."""
    folder: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    vars: Mapping[str, str]
    steps: tuple[Step, ...]

    @property
    def run_folder(self) -> Path:
        return self.root / self.folder

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise ExperimentError(f"{self.path}: no step {name!r} (steps: {', '.join(s.name for s in self.steps)})")


# ---------------------------------------------------------------------------------------------- loading

def parse_sets(pairs: Iterable[str]) -> dict[str, str]:
    """``["var=value", ...]`` (``--set``) -> {var: value}; a pair without ``=`` is an error."""
    out: dict[str, str] = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip():
            raise ExperimentError(f"--set: expected VAR=VALUE, got {p!r}")
        out[k.strip()] = v
    return out


def experiment_root(path: Path) -> Path:
    """The folder the steps run in: the parent of ``experiments/`` holding ``path``, else its folder."""
    path = path.resolve()
    return path.parent.parent if path.parent.name == "experiments" else path.parent


def load(path: str | os.PathLike, sets: Mapping[str, str] | None = None) -> Experiment:
    """Read and check an experiment file; ``sets`` override its ``[vars]`` (unknown names are errors)."""
    import tomllib

    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExperimentError(f"{path}: no such experiment file") from None
    except tomllib.TOMLDecodeError as e:
        raise ExperimentError(f"{path}: not valid TOML: {e}") from None
    where = str(path)

    def err(msg: str) -> ExperimentError:
        return ExperimentError(f"{where}: {msg}")

    unknown = set(doc) - {"experiment", "vars", "steps"}
    if unknown:
        raise err(f"unknown table(s) {', '.join(sorted(unknown))} (expected [experiment], [vars], [[steps]])")
    head = doc.get("experiment", {})
    if not isinstance(head, dict):
        raise err("[experiment] must be a table")
    extra = set(head) - {"name", "title", "description", "folder", "inputs", "outputs"}
    if extra:
        raise err(f"[experiment]: unknown field(s) {', '.join(sorted(extra))}")
    name = _str(head.get("name", path.stem), err, "[experiment] name")
    description = _str(head.get("description", ""), err, "[experiment] description")
    if not description.strip():
        raise err("[experiment] description: say what the experiment measures (it is required)")

    raw_vars = doc.get("vars", {})
    if not isinstance(raw_vars, dict):
        raise err("[vars] must be a table")
    vars_: dict[str, str] = {"name": name, "root": str(experiment_root(path))}
    for k, v in raw_vars.items():
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise err(f"[vars] {k}: expected a string or a number, got {type(v).__name__}")
        vars_[k] = str(v)
    for k, v in (sets or {}).items():
        if k not in raw_vars:
            raise ExperimentError(f"--set {k}: {where} has no variable {k!r} "
                                  f"(its [vars]: {', '.join(raw_vars) or 'none'})")
        vars_[k] = v
    for k in list(vars_):  # a variable may use the ones before it
        vars_[k] = _subst(vars_[k], vars_, lambda m, k=k: err(f"[vars] {k}: {m}"))
    folder = _subst(_str(head.get("folder", "runs/${name}"), err, "[experiment] folder"), vars_,
                    lambda m: err(f"[experiment] folder: {m}"))
    vars_["folder"] = folder

    raw_steps = doc.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise err("expected at least one [[steps]] table")
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        if not isinstance(raw, dict):
            raise err(f"steps[{i}] must be a table")
        steps.append(_step(raw, i, vars_, [s.name for s in steps], where))
    description = _subst(description, vars_, lambda m: err(f"[experiment] description: {m}"))
    title = _str(head.get("title", description.strip().split(". ")[0]), err, "[experiment] title")
    return Experiment(name=name, path=path, root=experiment_root(path), description=description.strip(),
                      title=title,
                      folder=folder,
                      inputs=tuple(_subst(x, vars_, lambda m: err(f"[experiment] inputs: {m}"))
                                   for x in _strs(head.get("inputs", []), err, "[experiment] inputs")),
                      outputs=tuple(_subst(x, vars_, lambda m: err(f"[experiment] outputs: {m}"))
                                    for x in _strs(head.get("outputs", []), err, "[experiment] outputs")),
                      vars=vars_, steps=tuple(steps))


_STEP_FIELDS = {
    "metacog": {"run", "stdout", "env", "unpack", "pack"},
    "unpack": {"archive", "into", "unless_exists", "missing_ok"},
    "pack": {"archive", "root", "paths", "only_if"},
    "copy": {"files", "into"},
    "git-show": {"revision", "files", "into"},
    "call": {"function", "args"},
}
_COMMON = {"name", "kind", "needs", "done_when", "parallel", "continue_on_error", "manual", "always",
           "when_exists"}


def _step(raw: dict, i: int, vars_: Mapping[str, str], before: list[str], where: str) -> Step:
    name = raw.get("name")
    label = f"steps[{i}]" if not isinstance(name, str) else f"step {name!r}"

    def err(msg: str) -> ExperimentError:
        return ExperimentError(f"{where}: {label}: {msg}")

    if not isinstance(name, str) or not _NAME.match(name):
        raise err(f"name: expected a word of letters, digits and _.+- (it names the log), got {name!r}")
    if name in before:
        raise err("name: used by an earlier step")
    kind = raw.get("kind", "metacog")
    if kind not in KINDS:
        raise err(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    extra = set(raw) - _COMMON - _STEP_FIELDS[kind]
    if extra:
        raise err(f"unknown field(s) {', '.join(sorted(extra))} for kind {kind!r} "
                  f"(its fields: {', '.join(sorted(_COMMON | _STEP_FIELDS[kind]))})")

    def sub(value: Any, fld: str) -> str:
        return _subst(_str(value, err, fld), vars_, lambda m: err(f"{fld}: {m}"))

    def subs(value: Any, fld: str) -> tuple[str, ...]:
        return tuple(_subst(x, vars_, lambda m: err(f"{fld}: {m}")) for x in _strs(value, err, fld))

    def need(fld: str) -> Any:
        if fld not in raw:
            raise err(f"{fld}: required for kind {kind!r}")
        return raw[fld]

    needs = subs(raw.get("needs", []), "needs")
    for n in needs:
        if n not in before:
            raise err(f"needs: {n!r} is not an earlier step")
    parallel = raw.get("parallel")
    if parallel is not None and (not isinstance(parallel, str) or not parallel):
        raise err(f"parallel: expected a group name, got {parallel!r}")
    coe = raw.get("continue_on_error", False)
    if not isinstance(coe, bool):
        raise err(f"continue_on_error: expected true or false, got {coe!r}")
    manual = raw.get("manual", False)
    if not isinstance(manual, bool):
        raise err(f"manual: expected true or false, got {manual!r}")
    always = raw.get("always", kind != "metacog")
    if not isinstance(always, bool):
        raise err(f"always: expected true or false, got {always!r}")
    kw: dict[str, Any] = dict(name=name, kind=kind, needs=needs, done_when=subs(raw.get("done_when", []), "done_when"),
                              parallel=parallel, continue_on_error=coe, manual=manual, always=always,
                              when_exists=sub(raw["when_exists"], "when_exists") if "when_exists" in raw else None)
    if kind == "metacog":
        run = need("run")
        if isinstance(run, str):
            try:
                words = shlex.split(run)
            except ValueError as e:
                raise err(f"run: cannot split {run!r}: {e}") from None
        elif isinstance(run, list):
            words = list(run)
        else:
            raise err(f"run: expected a string or a list of words, got {type(run).__name__}")
        argv = tuple(_subst(_str(w, err, "run"), vars_, lambda m: err(f"run: {m}")) for w in words)
        if argv and argv[0] == "metacog":
            argv = argv[1:]
        if not argv:
            raise err("run: empty command")
        env = raw.get("env", {})
        if not isinstance(env, dict):
            raise err("env: expected a table of NAME = \"value\"")
        kw.update(argv=argv, env={k: sub(v, f"env.{k}") for k, v in env.items()},
                  stdout=sub(raw["stdout"], "stdout") if "stdout" in raw else None)
        if "unpack" in raw:
            kw["unpack"] = _unpack(raw["unpack"], err, sub, "unpack.")
        if "pack" in raw:
            kw["pack"] = _pack(raw["pack"], err, sub, subs, "pack.", periodic=True)
    elif kind == "unpack":
        kw["unpack"] = _unpack(raw, err, sub, "")
    elif kind == "pack":
        kw["pack"] = _pack(raw, err, sub, subs, "", periodic=False)
    elif kind == "copy" and isinstance(raw.get("files"), dict):
        if "into" in raw:
            raise err("into: not with a files table (each file names its own target)")
        kw.update(files=tuple(sub(k, "files") for k in raw["files"]),
                  targets=tuple(sub(v, f"files.{k}") for k, v in raw["files"].items()))
        if not kw["files"]:
            raise err("files: expected at least one path")
    elif kind in ("copy", "git-show"):
        kw.update(files=subs(need("files"), "files"), into=sub(need("into"), "into"))
        if not kw["files"]:
            raise err("files: expected at least one path")
        if kind == "git-show":
            kw["revision"] = sub(need("revision"), "revision")
    else:
        fn = sub(need("function"), "function")
        if fn.count(":") != 1 or not all(fn.split(":")):
            raise err(f"function: expected 'module:function', got {fn!r}")
        kw.update(function=fn, args=subs(raw.get("args", []), "args"))
    return Step(**kw)


def _unpack(raw: Any, err: Callable, sub: Callable, pre: str) -> Unpack:
    if not isinstance(raw, dict):
        raise err(f"{pre or 'unpack'}: expected a table")
    extra = set(raw) - {"archive", "into", "unless_exists", "missing_ok"} - (_COMMON if not pre else set())
    if extra:
        raise err(f"{pre}: unknown field(s) {', '.join(sorted(extra))}")
    for f in ("archive", "into"):
        if f not in raw:
            raise err(f"{pre}{f}: required")
    ok = raw.get("missing_ok", True)
    if not isinstance(ok, bool):
        raise err(f"{pre}missing_ok: expected true or false")
    return Unpack(archive=sub(raw["archive"], pre + "archive"), into=sub(raw["into"], pre + "into"),
                  unless_exists=sub(raw["unless_exists"], pre + "unless_exists") if "unless_exists" in raw else None,
                  missing_ok=ok)


def _pack(raw: Any, err: Callable, sub: Callable, subs: Callable, pre: str, periodic: bool) -> Pack:
    if not isinstance(raw, dict):
        raise err(f"{pre or 'pack'}: expected a table")
    allowed = {"archive", "root", "paths", "only_if"} | ({"every_s"} if periodic else set())
    extra = set(raw) - allowed - (_COMMON if not pre else set())
    if extra:
        raise err(f"{pre}: unknown field(s) {', '.join(sorted(extra))}")
    for f in ("archive", "root", "paths"):
        if f not in raw:
            raise err(f"{pre}{f}: required")
    every = raw.get("every_s")
    if every is not None and (isinstance(every, bool) or not isinstance(every, (int, float)) or every <= 0):
        raise err(f"{pre}every_s: expected a positive number of seconds, got {every!r}")
    paths = subs(raw["paths"], pre + "paths")
    if not paths:
        raise err(f"{pre}paths: expected at least one path")
    for p in paths:
        if os.path.isabs(p) or ".." in Path(p).parts:
            raise err(f"{pre}paths: {p!r} must be relative to the root, inside it")
    return Pack(archive=sub(raw["archive"], pre + "archive"), root=sub(raw["root"], pre + "root"), paths=paths,
                only_if=sub(raw["only_if"], pre + "only_if") if "only_if" in raw else None,
                every_s=float(every) if every is not None else None)


def _str(value: Any, err: Callable, fld: str) -> str:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise err(f"{fld}: expected a string, got {value!r}")
    return str(value)


def _strs(value: Any, err: Callable, fld: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise err(f"{fld}: expected a string or a list of strings, got {value!r}")
    return [_str(v, err, fld) for v in value]


def _subst(text: str, vars_: Mapping[str, str], err: Callable[[str], Exception]) -> str:
    def one(m: re.Match) -> str:
        if m.group(1) not in vars_:
            raise err(f"unknown variable ${{{m.group(1)}}} (defined: {', '.join(vars_)})")
        return vars_[m.group(1)]

    return _VAR.sub(one, text)


def find(name: str, cwd: str | os.PathLike | None = None) -> Path:
    """The file of experiment ``name``: a path to a ``.toml``, or ``experiments/NAME.toml`` of ``cwd``,
    then of the repository root beside the package."""
    p = Path(name)
    if p.suffix == ".toml" or os.sep in name:
        if p.is_file():
            return p
        raise ExperimentError(f"{name}: no such experiment file")
    for folder in search_folders(cwd):
        if (folder / f"{name}.toml").is_file():
            return folder / f"{name}.toml"
    known = sorted({q.stem for f in search_folders(cwd) for q in f.glob("*.toml")})
    raise ExperimentError(f"no experiment {name!r} in {', '.join(map(str, search_folders(cwd)))} "
                          f"(known: {', '.join(known) or 'none'})")


def search_folders(cwd: str | os.PathLike | None = None) -> list[Path]:
    """``experiments/`` of ``cwd`` and of the repository root beside the package (those that exist)."""
    here = Path(cwd or os.getcwd()).resolve() / "experiments"
    repo = Path(__file__).resolve().parents[2] / "experiments"
    return [f for f in dict.fromkeys([here, repo]) if f.is_dir()]


# ---------------------------------------------------------------------------------------------- actions

def unpack(u: Unpack, root: Path, log: TextIO) -> None:
    """Unpack ``u.archive`` into ``u.into`` (tar's data filter: no absolute paths, links out, devices).
    A wildcard ``archive`` unpacks each match; ``{stem}`` in ``unless_exists`` is the match's name
    without ``.tar.gz`` (a run's archive is named as its folder)."""
    if glob.has_magic(u.archive):
        archives = sorted(glob.glob(u.archive, root_dir=root))
        if not archives and not u.missing_ok:
            raise FileNotFoundError(f"unpack: no archive matches {u.archive}")
        for a in archives:
            unpack(Unpack(a, u.into, u.unless_exists, u.missing_ok), root, log)
        return
    archive, into = root / u.archive, root / u.into
    stem = archive.name.removesuffix(".tar.gz").removesuffix(".tgz")
    unless = u.unless_exists.replace("{stem}", stem) if u.unless_exists else None
    if unless and (root / unless).exists():
        print(f"{unless} exists: {u.archive} not unpacked", file=log, flush=True)
        return
    if not archive.is_file():
        if u.missing_ok:
            print(f"{u.archive}: no archive, nothing to unpack", file=log, flush=True)
            return
        raise FileNotFoundError(f"unpack: archive {archive} does not exist")
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(into, filter="data")
    print(f"unpacked {u.archive} into {u.into}", file=log, flush=True)


def pack_members(p: Pack, root: Path) -> list[str]:
    """The paths (relative to ``p.root``) that ``p`` packs now, in the order given, globs sorted."""
    base = root / p.root
    out: list[str] = []
    for pattern in p.paths:
        wild = glob.has_magic(pattern)
        for m in (sorted(glob.glob(pattern, root_dir=base)) if wild else [pattern]):
            if not (base / m).exists():
                continue
            if wild and p.only_if and not (base / m).parent.joinpath(p.only_if).exists():
                continue
            if m not in out:
                out.append(m)
    return out


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
    info.pax_headers = {}
    return info


def pack(p: Pack, root: Path, log: TextIO) -> int:
    """Write ``p.archive`` (beside it, then renamed); returns the number of paths packed (0: untouched)."""
    members = pack_members(p, root)
    if not members:
        print(f"pack {p.archive}: nothing to pack yet", file=log, flush=True)
        return 0
    with atomic_tmp_path(root / p.archive) as tmp:
        # reproducible, as results/README.md packs: names sorted, no times or owners, so unchanged
        # records give the same bytes and git sees no change
        with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for m in members:
                tar.add(root / p.root / m, arcname=m, filter=_plain)
    print(f"packed {len(members)} path(s) into {p.archive}", file=log, flush=True)
    return len(members)


def copy(files: Sequence[str], into: str | None, root: Path, log: TextIO, targets: Sequence[str] = ()) -> None:
    """Copy each file into ``into`` (created), or to its own path of ``targets``, each by one rename."""
    for i, f in enumerate(files):
        src = root / f
        if not src.is_file():
            raise FileNotFoundError(f"copy: {src} does not exist")
        dest = root / targets[i] if targets else root / into / src.name
        with atomic_tmp_path(dest) as tmp:
            shutil.copyfile(src, tmp)
        print(f"copied {f} -> {dest.relative_to(root)}", file=log, flush=True)


def git_show(revision: str, files: Sequence[str], into: str, root: Path, log: TextIO) -> None:
    """Each repository path at ``revision`` (``git show REV:PATH``) written into ``into`` by one rename."""
    for f in files:
        with atomic_open(root / into / Path(f).name, "wb") as out:
            r = subprocess.run(["git", "show", f"{revision}:{f}"], cwd=root, stdout=out, stderr=subprocess.PIPE)
        if r.returncode:
            # atomic_open already replaced the target with the (empty) output: take it back
            (root / into / Path(f).name).unlink(missing_ok=True)
            raise RuntimeError(f"git show {revision}:{f}: {r.stderr.decode(errors='replace').strip()}")
        print(f"{revision}:{f} -> {into}/", file=log, flush=True)


def call(function: str, args: Sequence[str], root: Path, log: TextIO) -> None:
    """``module:function(*args)`` (the runner works in ``root``); its return value is logged."""
    out = resolve(function)(*args)
    print(f"{function}: {out}", file=log, flush=True)


# ---------------------------------------------------------------------------------------------- runner

@dataclass
class Progress:
    """``experiment.json``: the finished steps of an experiment folder, rewritten atomically."""

    path: Path
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def read(cls, path: Path) -> "Progress":
        if not path.is_file():
            return cls(path)
        doc = read_json(path)  # a malformed file is an error naming it
        return cls(path, dict(doc.get("steps", {})))

    def finished(self, step: Step) -> bool:
        rec = self.steps.get(step.name)
        return bool(rec) and rec.get("fingerprint") == step.fingerprint()

    def mark(self, exp: Experiment, step: Step, seconds: float) -> None:
        with self.lock:
            self.steps[step.name] = {"fingerprint": step.fingerprint(), "command": step.command(),
                                     "seconds": round(seconds, 1),
                                     "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            write_json_atomic(self.path, {"experiment": exp.name, "file": str(exp.path), "steps": self.steps})


def is_done(step: Step, progress: Progress, root: Path) -> bool:
    """Finished: recorded with the same fingerprint, or every ``done_when`` path exists."""
    if progress.finished(step):
        return True
    return bool(step.done_when) and all((root / p).exists() for p in step.done_when)


def to_skip(step: Step, progress: Progress, root: Path) -> bool:
    """Skipped on this call: finished, and not an ``always`` step (``done_when`` met skips those too)."""
    if step.always:
        return bool(step.done_when) and all((root / p).exists() for p in step.done_when)
    return is_done(step, progress, root)


def select(exp: Experiment, only: Sequence[str] = (), start: str | None = None) -> list[Step]:
    """The steps to consider: ``only`` those named, or from ``start`` on, or all (in file order); a
    ``manual`` step only when named in ``only``."""
    for n in [*only, *([start] if start else [])]:
        exp.step(n)
    if only and start:
        raise ExperimentError("--only and --from: give one of them")
    if only:
        return [s for s in exp.steps if s.name in only]
    if start:
        names = [s.name for s in exp.steps]
        return [s for s in exp.steps[names.index(start):] if not s.manual]
    return [s for s in exp.steps if not s.manual]


def groups(steps: Sequence[Step]) -> list[list[Step]]:
    """Consecutive steps of one ``parallel`` group together; every other step alone."""
    out: list[list[Step]] = []
    for s in steps:
        if s.parallel and out and out[-1][0].parallel == s.parallel:
            out[-1].append(s)
        else:
            out.append([s])
    return out


class StepFailed(RuntimeError):
    """A step that ended badly; the message names it and its log."""


def run(exp: Experiment, *, only: Sequence[str] = (), start: str | None = None, redo: Sequence[str] = (),
        dry_run: bool = False, out: TextIO = sys.stdout, workers: int | None = None) -> int:
    """Run the experiment's (selected) steps in order, skipping finished ones; returns the number of
    steps that failed under ``continue_on_error`` (a failure without it raises :class:`StepFailed`)."""
    steps = select(exp, only, start)
    for n in redo:
        exp.step(n)
    progress = Progress.read(exp.run_folder / "experiment.json")
    if dry_run:
        for s in steps:
            state = "finished" if to_skip(s, progress, exp.root) and s.name not in redo else "to run"
            print(f"# {s.name} ({state})", file=out)
            print(s.command(), file=out)
        return 0
    workers = workers or os.cpu_count() or 1
    (exp.run_folder / "logs").mkdir(parents=True, exist_ok=True)
    total, failed = len(steps), 0
    index = {s.name: i + 1 for i, s in enumerate(steps)}
    live: list[threading.Thread] = []
    cwd = os.getcwd()
    os.chdir(exp.root)  # a ``call`` step's relative paths, as the commands' (which run there)
    try:
        for group in groups(steps):
            failed += _run_group(exp, group, progress, index, total, redo, workers, out, live)
    finally:  # SIGTERM (SystemExit) or Ctrl-C: end the running commands, let their last pack finish
        stop_children()
        deadline = time.time() + 60
        for t in live:
            t.join(max(0.0, deadline - time.time()))
        os.chdir(cwd)
    return failed


def _run_group(exp: Experiment, group: list[Step], progress: Progress, index: Mapping[str, int], total: int,
               redo: Sequence[str], workers: int, out: TextIO, live: list[threading.Thread]) -> int:
    failed = 0
    todo = []
    for s in group:
        if s.name not in redo and to_skip(s, progress, exp.root):
            print(f"[{index[s.name]}/{total}] {s.name}: finished before, skipped", file=out, flush=True)
            continue
        if s.when_exists and not (exp.root / s.when_exists).exists():
            print(f"[{index[s.name]}/{total}] {s.name}: {s.when_exists} does not exist, passed over", file=out, flush=True)
            continue
        for n in s.needs:
            if not is_done(exp.step(n), progress, exp.root):
                raise StepFailed(f"step {s.name!r} needs {n!r}, which is not finished "
                                 f"(run it first: --only {n})")
        todo.append(s)
    results: dict[str, BaseException | None] = {}
    for batch in [todo[i:i + workers] for i in range(0, len(todo), workers)]:
        threads = []
        for s in batch:
            print(f"[{index[s.name]}/{total}] {s.name}: {s.command()}", file=out, flush=True)
            t = threading.Thread(target=_guarded, args=(exp, s, progress, results), daemon=True)
            threads.append(t)
            live.append(t)
            t.start()
        for t in threads:
            while t.is_alive():  # join with a timeout so that SIGTERM reaches the main thread
                t.join(0.2)
    for s in todo:
        e = results.get(s.name)
        log = exp.run_folder / "logs" / f"{s.name}.log"
        if e is None:
            rec = progress.steps[s.name]
            print(f"[{index[s.name]}/{total}] {s.name}: done in {rec['seconds']:.0f} s", file=out, flush=True)
            continue
        msg = f"step {s.name!r} failed: {e} (log: {log})"
        if not s.continue_on_error:
            raise StepFailed(msg)
        failed += 1
        print(f"[{index[s.name]}/{total}] {msg}; going on (continue_on_error)", file=out, flush=True)
    return failed


_CHILDREN: set[subprocess.Popen] = set()
_CHILDREN_LOCK = threading.Lock()


def _guarded(exp: Experiment, step: Step, progress: Progress, results: dict) -> None:
    try:
        t0 = time.time()
        run_step(exp, step)
        progress.mark(exp, step, time.time() - t0)
        results[step.name] = None
    except BaseException as e:  # reported by the main thread
        results[step.name] = e


def run_step(exp: Experiment, step: Step) -> None:
    """Run one step now, its output appended to ``<folder>/logs/<step>.log``; raises when it fails."""
    root = exp.root
    with open(exp.run_folder / "logs" / f"{step.name}.log", "a", encoding="utf-8") as log:
        print(f"--- {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {step.command()}", file=log, flush=True)
        if step.kind == "unpack":
            unpack(step.unpack, root, log)
        elif step.kind == "pack":
            pack(step.pack, root, log)
        elif step.kind == "copy":
            copy(step.files, step.into, root, log, step.targets)
        elif step.kind == "git-show":
            git_show(step.revision, step.files, step.into, root, log)
        elif step.kind == "call":
            call(step.function, step.args, root, log)
        else:
            _run_metacog(step, root, log)


def _run_metacog(step: Step, root: Path, log: TextIO) -> None:
    if step.unpack:
        unpack(step.unpack, root, log)
    env = {**os.environ, **step.env}
    argv = [sys.executable, "-m", "metacog_fast", *step.argv]
    stop = threading.Event()
    packer = None
    if step.pack and step.pack.every_s:
        def periodic() -> None:
            while not stop.wait(step.pack.every_s):
                try:
                    pack(step.pack, root, log)
                except Exception as e:  # a failed periodic pack must not end the run; the last one decides
                    print(f"periodic pack failed: {e}", file=log, flush=True)

        packer = threading.Thread(target=periodic, daemon=True)
        packer.start()
    try:
        if step.stdout:
            with atomic_open(root / step.stdout, "w") as f:
                rc = _wait(argv, root, env, f, log)
                if rc:
                    raise StepFailed(f"exit status {rc}")
        else:
            rc = _wait(argv, root, env, log, log)
    finally:
        stop.set()
        if packer:
            packer.join()
        if step.pack:
            pack(step.pack, root, log)
    if rc:
        raise StepFailed(f"exit status {rc}")


def _wait(argv: list[str], cwd: Path, env: Mapping[str, str], stdout: TextIO, stderr: TextIO) -> int:
    """Run ``argv`` to its end; if this process is ended first (SIGTERM -> SystemExit), end it too."""
    proc = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
    with _CHILDREN_LOCK:
        _CHILDREN.add(proc)
    try:
        return proc.wait()
    finally:
        with _CHILDREN_LOCK:
            _CHILDREN.discard(proc)
        stop_process(proc)


def stop_process(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM a still running child, then SIGKILL it after ``grace_s``."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop_children() -> None:
    """End every command the runner's threads started (the main thread ends on SIGTERM; they must too)."""
    with _CHILDREN_LOCK:
        procs = list(_CHILDREN)
    for p in procs:
        stop_process(p)
