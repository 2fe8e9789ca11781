"""Experiments as data (:mod:`metacog_fast.runs.experiment`, ``metacog experiment``): a malformed file is
an error naming the file, the step and the field; a run of real ``metacog`` steps killed with SIGTERM in
the middle resumes without rerunning its finished steps and takes its running command down with it;
``--dry-run`` prints every command; every committed experiment loads and each of its ``metacog``
commands parses."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from metacog_fast.runs import experiment as ex

REPO = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, text: str, name: str = "exp") -> Path:
    folder = tmp_path / "experiments"
    folder.mkdir(exist_ok=True)
    p = folder / f"{name}.toml"
    p.write_text(text)
    return p


HEAD = '[experiment]\ndescription = "a test"\n'


@pytest.mark.parametrize("body, words", [
    ('[[steps]]\nname = "a"\nrun = "info"\nneeds = ["b"]\n', ["step 'a'", "needs", "'b' is not an earlier step"]),
    ('[[steps]]\nname = "a"\nrun = "info --x ${nope}"\n', ["step 'a'", "run", "${nope}"]),
    ('[[steps]]\nname = "a"\nkind = "shell"\nrun = "ls"\n', ["step 'a'", "kind", "'shell'"]),
    ('[[steps]]\nname = "a"\nrun = "info"\nretries = 3\n', ["step 'a'", "retries"]),
    ('[[steps]]\nname = "a"\nkind = "pack"\narchive = "x.tar.gz"\nroot = "r"\n', ["step 'a'", "paths: required"]),
    ('[[steps]]\nname = "a"\nkind = "pack"\narchive = "x.tar.gz"\nroot = "r"\npaths = ["../up"]\n',
     ["step 'a'", "paths", "inside it"]),
    ('[[steps]]\nname = "a"\nrun = 3\n', ["step 'a'", "run: expected a string or a list"]),
    ('[[steps]]\nname = "a"\nrun = "info"\n[[steps]]\nname = "a"\nrun = "info"\n', ["step 'a'", "name: used"]),
    ('[[steps]]\nname = "a"\nrun = "info"\nunpack = { into = "x" }\n', ["step 'a'", "unpack.archive: required"]),
    ('[[steps]]\nname = "a"\nkind = "call"\nfunction = "nocolon"\n', ["step 'a'", "function", "module:function"]),
    ('[[steps]]\nname = "a b"\nrun = "info"\n', ["step 'a b'", "name: expected a word"]),
    ('[[steps]]\nrun = "info"\n', ["steps[0]", "name: expected a word"]),
    ('[vars]\nx = [1]\n[[steps]]\nname = "a"\nrun = "info"\n', ["[vars] x"]),
])
def test_a_malformed_file_is_an_error_naming_file_step_and_field(tmp_path, body, words):
    p = _write(tmp_path, HEAD + body)
    with pytest.raises(ex.ExperimentError) as e:
        ex.load(p)
    assert str(p) in str(e.value)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_vars_substitute_and_set_overrides_only_known_ones(tmp_path):
    p = _write(tmp_path, HEAD + '[vars]\nactor = "a1"\nout = "runs/${actor}"\n'
                                '[[steps]]\nname = "s"\nrun = ["run", "alfworld", "--llm", "${actor}", "--out", "${out}"]\n'
                                '[[steps]]\nname = "t"\nrun = "info --json"\nneeds = ["s"]\n')
    e = ex.load(p)
    assert e.steps[0].argv == ("run", "alfworld", "--llm", "a1", "--out", "runs/a1")
    assert e.root == tmp_path and e.folder == "runs/exp"
    e = ex.load(p, ex.parse_sets(["actor=finetuned:alfworld"]))
    assert e.steps[0].argv[3] == "finetuned:alfworld" and e.steps[0].argv[5] == "runs/finetuned:alfworld"
    with pytest.raises(ex.ExperimentError, match="--set workers: .* has no variable 'workers'"):
        ex.load(p, {"workers": "2"})
    with pytest.raises(ex.ExperimentError, match="--set: expected VAR=VALUE"):
        ex.parse_sets(["actor"])
    assert ex.load(p).steps[0].fingerprint() != e.steps[0].fingerprint()


def _memory_json(path: Path) -> None:
    from metacog_fast.experience import entries as en
    from metacog_fast.experience.memory import ExperienceMemory

    m = ExperienceMemory()
    m.ensure_tools("alfworld")
    m.add_strategic(en.StrategicEntry("many commands have no effect", "read the options first",
                                      en.Provenance("t", "r", "2026-01-01", "llama-cpp://")))
    m.export_json(path)


# A real metacog step made slow: sitecustomize (on PYTHONPATH for that step only) records the pid of
# the command's process and sleeps before the command starts, so the runner is killed while it runs.
SLOW = """
import os, time
if os.environ.get("SLOW_PID_FILE"):
    open(os.environ["SLOW_PID_FILE"], "w").write(str(os.getpid()))
    time.sleep(float(os.environ.get("SLOW_S", "0")))
"""


def _three_steps(tmp_path: Path, slow_s: float) -> Path:
    (tmp_path / "slow").mkdir(exist_ok=True)
    (tmp_path / "slow" / "sitecustomize.py").write_text(SLOW)
    _memory_json(tmp_path / "in.json")
    return _write(tmp_path, HEAD + f'''
folder = "runs/three"

[vars]
slow = "{slow_s}"

[[steps]]
name = "import"
run = "memory import in.json mem.db"

[[steps]]
name = "export"
run = "memory export mem.db out.json"
env = {{ PYTHONPATH = "{tmp_path / 'slow'}", SLOW_PID_FILE = "{tmp_path / 'export.pid'}", SLOW_S = "${{slow}}" }}
done_when = []

[[steps]]
name = "show"
run = "memory show out.json"
stdout = "shown.txt"
needs = ["export"]
''', name="three")


def _runner(tmp_path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "metacog_fast", "experiment", "run", "three", *args],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def test_a_killed_run_resumes_without_rerunning_finished_steps(tmp_path):
    _three_steps(tmp_path, slow_s=120)
    record = tmp_path / "runs" / "three" / "experiment.json"
    proc = _runner(tmp_path)
    deadline = time.time() + 180
    while time.time() < deadline and not (tmp_path / "export.pid").exists():
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    child = int((tmp_path / "export.pid").read_text())
    assert json.loads(record.read_text())["steps"].keys() == {"import"}
    proc.send_signal(signal.SIGTERM)  # the runner, in the middle of step 2
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 128 + signal.SIGTERM, out
    deadline = time.time() + 30
    while time.time() < deadline and _alive(child):
        time.sleep(0.2)
    assert not _alive(child), "the running command outlived its killed runner"
    assert json.loads(record.read_text())["steps"].keys() == {"import"}
    assert not (tmp_path / "out.json").exists()

    _three_steps(tmp_path, slow_s=0)  # same commands; only the sleep (a variable of the env) is gone
    proc = _runner(tmp_path, "--set", "slow=0")
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert "import: finished before, skipped" in out
    logs = tmp_path / "runs" / "three" / "logs"
    assert (logs / "import.log").read_text().count("--- ") == 1  # not rerun
    assert (logs / "export.log").read_text().count("--- ") == 2  # killed, then run again
    assert json.loads(record.read_text())["steps"].keys() == {"import", "export", "show"}
    assert "read the options first" in (tmp_path / "shown.txt").read_text()

    proc = _runner(tmp_path, "--set", "slow=0")  # everything finished: nothing runs
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0 and out.count("finished before, skipped") == 3, out


def test_dry_run_prints_every_command_and_runs_nothing(tmp_path):
    _three_steps(tmp_path, slow_s=0)
    out = subprocess.run([sys.executable, "-m", "metacog_fast", "experiment", "run", "three", "--dry-run"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for line in ("metacog memory import in.json mem.db", "metacog memory export mem.db out.json",
                 "metacog memory show out.json > shown.txt"):
        assert line in out.stdout, out.stdout
    assert not (tmp_path / "runs" / "three" / "logs").exists() and not (tmp_path / "mem.db").exists()


def test_only_from_redo_and_needs(tmp_path):
    exp = ex.load(_three_steps(tmp_path, slow_s=0))
    assert [s.name for s in ex.select(exp, only=("show",))] == ["show"]
    assert [s.name for s in ex.select(exp, start="export")] == ["export", "show"]
    with pytest.raises(ex.ExperimentError, match="no step 'nope'"):
        ex.select(exp, only=("nope",))
    with pytest.raises(ex.StepFailed, match="needs 'export', which is not finished"):
        ex.run(exp, only=("show",), out=open(os.devnull, "w"))


def test_pack_unpack_copy_and_call_steps(tmp_path):
    runs = tmp_path / "runs" / "r"
    for d in ("a_run0", "a_run1"):
        (runs / d).mkdir(parents=True)
        (runs / d / "run.json").write_text("{}")
    (runs / "a_run0" / "summary.json").write_text("{}")
    (runs / "config.json").write_text("{}")
    p = _write(tmp_path, HEAD + '''
[[steps]]
name = "pack"
kind = "pack"
archive = "rec/r.tar.gz"
root = "runs"
paths = ["r/config.json", "r/*_run*/summary.json", "r/*_run*/run.json", "r/missing"]
only_if = "summary.json"

[[steps]]
name = "unpack"
kind = "unpack"
archive = "rec/*.tar.gz"
into = "restored"
unless_exists = "restored/{stem}/nothing"

[[steps]]
name = "copy"
kind = "copy"
files = { "restored/r/config.json" = "out/c.json" }

[[steps]]
name = "call"
kind = "call"
function = "os.path:exists"
args = ["out/c.json"]
''')
    exp = ex.load(p)
    assert ex.run(exp, out=open(os.devnull, "w")) == 0
    with tarfile.open(tmp_path / "rec" / "r.tar.gz") as t:  # the unfinished run is left out
        assert sorted(t.getnames()) == ["r/a_run0/run.json", "r/a_run0/summary.json", "r/config.json"]
    assert (tmp_path / "restored" / "r" / "a_run0" / "summary.json").is_file()
    assert (tmp_path / "out" / "c.json").read_text() == "{}"
    assert "os.path:exists: True" in (tmp_path / "runs" / "exp" / "logs" / "call.log").read_text()
    assert not list((tmp_path / "rec").glob(".*"))  # no temporary file left beside the archive


COMMITTED = sorted((REPO / "experiments").glob("*.toml"))


def test_experiments_are_committed():
    assert len(COMMITTED) >= 10, COMMITTED


@pytest.mark.parametrize("path", COMMITTED, ids=[p.stem for p in COMMITTED])
def test_every_committed_experiment_loads_and_its_commands_parse(path):
    from metacog_fast.cli.experiment import check_commands

    exp = ex.load(path)
    assert exp.description and exp.title and exp.steps
    assert not check_commands(exp)


def test_pack_is_reproducible(tmp_path):
    (tmp_path / "runs" / "r" / "episodes").mkdir(parents=True)
    for name in ("b.json", "a.json"):
        (tmp_path / "runs" / "r" / "episodes" / name).write_text(name)
    p = ex.Pack(archive="rec.tar.gz", root="runs", paths=("r/episodes",))
    ex.pack(p, tmp_path, open(os.devnull, "w"))
    first = (tmp_path / "rec.tar.gz").read_bytes()
    time.sleep(1.1)
    os.utime(tmp_path / "runs" / "r" / "episodes" / "a.json")
    ex.pack(p, tmp_path, open(os.devnull, "w"))
    assert (tmp_path / "rec.tar.gz").read_bytes() == first
    with tarfile.open(tmp_path / "rec.tar.gz") as t:
        assert t.getnames() == ["r/episodes", "r/episodes/a.json", "r/episodes/b.json"]


def test_list_and_show_find_the_committed_experiments(tmp_path):
    run = lambda *a: subprocess.run([sys.executable, "-m", "metacog_fast", "experiment", *a], cwd=tmp_path,
                                    capture_output=True, text=True, timeout=120)
    out = run("list")  # from another directory: the repository's experiments/
    assert out.returncode == 0 and "alfworld_tables" in out.stdout and "sim_tables" in out.stdout, out.stderr
    out = run("show", "sim_tables", "--set", "judge=http://127.0.0.1:1/v1")
    assert out.returncode == 0, out.stderr
    assert "--judge-llm http://127.0.0.1:1/v1" in out.stdout and "costs" in out.stdout
    out = run("show", "no_such_experiment")
    assert out.returncode == 2 and "no experiment 'no_such_experiment'" in out.stderr


def test_serve_starts_answers_and_stops(tmp_path):
    import socket

    from metacog_fast.llm import serve

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    line = serve.start(port, 1, wait_s=120)
    try:
        pid = serve.running_pid(port)
        assert pid is not None and serve.answers(port), line
        assert serve.start(port, 1).startswith("already running")
    finally:
        assert serve.stop(port) == f"stopped pid {pid}"
    assert not serve.answers(port) and serve.running_pid(port) is None
    with pytest.raises(serve.ServeError, match="--gguf: GGUF not found"):
        serve.start(port, 1, gguf=str(tmp_path / "none.gguf"))


def test_call_steps_reproduce_the_committed_tables(tmp_path):
    """The two tables the scripts computed inline (SOP events of experience run 3, the town's costs)
    come out of the committed records as committed."""
    from metacog_fast.experience.sop_events import write_sop_events
    from metacog_fast.town.costs import write_costs

    exp = REPO / "results" / "experience" / "run3"
    with tarfile.open(exp / "records" / "continuous.tar.gz") as t:
        t.extractall(tmp_path / "exp", filter="data")
    write_sop_events(str(tmp_path / "exp" / "continuous"), str(tmp_path / "sop"))
    assert (tmp_path / "sop" / "sop_events.md").read_text() == (exp / "continuous" / "sop_events.md").read_text()
    assert json.loads((tmp_path / "sop" / "sop_events.json").read_text()) == \
        json.loads((exp / "continuous" / "sop_events.json").read_text())

    sim = REPO / "results" / "sim" / "run3"
    scenarios = sorted(p.name.removesuffix(".tar.gz") for p in (sim / "records").glob("*.tar.gz"))
    assert scenarios
    for s in scenarios:
        with tarfile.open(sim / "records" / f"{s}.tar.gz") as t:
            t.extractall(tmp_path / "sim", filter="data")
    write_costs(str(tmp_path / "sim"), str(tmp_path / "rep"), "none")
    committed = [line for line in (sim / "costs.md").read_text().splitlines()
                 if not line.startswith("| ") or line.split(" | ")[0][2:] in scenarios or line.startswith("| scenario")
                 or line.startswith("|---")]
    assert (tmp_path / "rep" / "costs.md").read_text().splitlines() == committed
