"""ScienceWorld (``scienceworld`` package, a Scala simulator behind py4j) behind the common protocol.

Tasks: a name (``"find-living-thing"``), a task id (``"4-1"``) or an index 0-29 in the
order of the ScienceWorld paper's task ids (1-1 boil, 1-2 melt, ..., 10-2
mendelian-genetics-unknown-plant; :data:`TASKS`). Variations: the simulator's own
train/dev/test split; ``variation=`` is the absolute variation index and must belong to
``split``; without it, successive resets walk through the split's variations in order.

Observation: text. ``info["admissible"]`` = ``get_valid_action_object_combinations()``,
``info["score"]`` 0-100 (negative when the task is failed), reward = score change,
``info["won"]`` = score reached 100. The expert is the gold path from
``load(..., generateGoldPath=True)``.

Crash handling: if the JVM dies (or py4j loses it) during a step, the adapter starts a new
JVM, reloads the task, and returns ``done=True`` with ``info["errored"]=True`` for the
broken episode; the next ``reset()`` works normally. A reset that hits a dead JVM is
retried once on a fresh one.
"""
from __future__ import annotations

import logging
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from metacog_fast._extras import require
from metacog_fast.envs.base import Env, EnvSetupError
from metacog_fast.envs.probe import ProbeResult, package_version

SPLITS = ("train", "dev", "test")
JAVA_HINT = "install Java >= 8 (Debian/Ubuntu: apt-get install -y default-jre-headless; or set JAVA_HOME / PATH)"


@lru_cache(maxsize=1)
def java_version() -> int | None:
    """Major version of the ``java`` on PATH, or None when there is none."""
    java = shutil.which("java")
    if java is None:
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major  # "1.8.0" -> 8


def check_java() -> int:
    """Raise :class:`EnvSetupError` with the fix when Java >= 8 is missing; return the major version."""
    v = java_version()
    if v is None:
        raise EnvSetupError(f"ScienceWorld needs Java, and no working `java` is on PATH: {JAVA_HINT}")
    if v < 8:
        raise EnvSetupError(f"ScienceWorld needs Java >= 8, found Java {v}: {JAVA_HINT}")
    return v


def _task_table() -> list[tuple[str, str]]:
    ID2TASK = require("scienceworld.constants", "scienceworld", "the ScienceWorld environment").ID2TASK

    return list(ID2TASK.items())


TASKS: tuple[str, ...] = ()
"""The 30 task names in task-id order (filled on first use; see :func:`task_names`)."""


def task_names() -> list[str]:
    """The 30 task names, index i = task i of docs/design.md §3."""
    global TASKS
    if not TASKS:
        TASKS = tuple(name for _, name in _task_table())
    return list(TASKS)


def resolve_task(task: int | str) -> str:
    """Task index 0-29, id ("4-1") or name -> the simulator's task name; ValueError otherwise."""
    names = task_names()
    if isinstance(task, bool):
        raise ValueError(f"task: expected a task name, id or index 0-29, got {task!r}")
    if isinstance(task, int) or (isinstance(task, str) and task.isdigit()):
        i = int(task)
        if not 0 <= i < len(names):
            raise ValueError(f"task: index {i} out of range 0..{len(names) - 1}")
        return names[i]
    ids = dict(_task_table())
    if task in ids:
        return ids[task]
    if task in names:
        return task
    raise ValueError(f"task: unknown ScienceWorld task {task!r}; expected an index 0-29, an id like '4-1' or one of {names}")


class _DeadJvmLogFilter(logging.Filter):
    """Drops py4j's connection tracebacks about JVMs of this module that are dead or replaced.

    py4j logs one traceback per retry (and more when the dead gateway object is collected);
    the adapter reports the crash once, in ``info["error"]``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.dead_addresses: set[str] = set()
        self.live: dict[str, Any] = {}  # ":port)" -> the JVM's Popen

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if any(addr in msg for addr in self.dead_addresses):
            return False
        for addr, proc in list(self.live.items()):
            if addr in msg and proc.poll() is not None:
                return False
        return True


_DEAD_JVM_FILTER = _DeadJvmLogFilter()
logging.getLogger("py4j.java_gateway").addFilter(_DEAD_JVM_FILTER)


def _is_connection_error(exc: BaseException) -> bool:
    from py4j.protocol import Py4JError, Py4JJavaError

    return isinstance(exc, (OSError, EOFError)) or (isinstance(exc, Py4JError) and not isinstance(exc, Py4JJavaError))


@dataclass
class ScienceWorldConfig:
    """Options of :class:`ScienceWorldEnv` (``make_env("scienceworld", **options)``)."""

    task: int | str = "find-living-thing"
    """Task name, id ("4-1") or index 0-29."""
    variation: int | None = None
    """Absolute variation index (must be in ``split``); None = walk through the split's variations."""
    split: str = "train"
    """Variation split: train, dev or test."""
    simplifications: str = ""
    """ScienceWorld simplification string, e.g. "easy" or "teleportAction,openDoors"."""
    step_limit: int = 100
    """Simulator step limit (done=True beyond it)."""
    gold_path: bool = True
    """Generate the gold path at load (the expert; costs a little load time)."""


class ScienceWorldEnv(Env):
    """One ScienceWorld task; one JVM per adapter (``close()`` stops it)."""

    name = "scienceworld"

    def __init__(self, config: ScienceWorldConfig | None = None, **options: Any) -> None:
        super().__init__()
        cfg = config or ScienceWorldConfig(**options)
        if cfg.split not in SPLITS:
            raise ValueError(f"split: expected one of {SPLITS}, got {cfg.split!r}")
        if cfg.step_limit < 1:
            raise ValueError(f"step_limit: expected >= 1, got {cfg.step_limit}")
        check_java()
        try:
            require("scienceworld", "scienceworld", "the ScienceWorld environment")
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EnvSetupError(f"{self.name} is not importable: {exc}") from exc
        self.config = cfg
        self.task = resolve_task(cfg.task)
        self.restarts = 0
        self._sw: Any = None
        self._start_jvm()
        self._variations = self._split_variations()
        if cfg.variation is not None:
            self._check_variation(int(cfg.variation))
        self._cycle = 0
        self._loaded: int | None = None
        self.variation: int | None = None
        self._gold: list[str] = []
        self._on_path = True
        self._t = 0
        self._task_desc = ""

    # -- JVM lifecycle -------------------------------------------------------------------
    def _start_jvm(self) -> None:
        from scienceworld import ScienceWorldEnv as _SW

        self._sw = _SW("", envStepLimit=self.config.step_limit)
        self._loaded = None
        gw = self._sw._gateway
        _DEAD_JVM_FILTER.live[f":{gw.gateway_parameters.port})"] = gw.java_process

    @property
    def raw(self) -> Any:
        """The wrapped ``scienceworld.ScienceWorldEnv`` (replaced when the JVM is restarted)."""
        return self._sw

    @property
    def jvm_pid(self) -> int | None:
        """Process id of this adapter's JVM (None when stopped)."""
        try:
            return int(self._sw._gateway.java_process.pid)
        except AttributeError:
            return None

    def jvm_alive(self) -> bool:
        try:
            return self._sw._gateway.java_process.poll() is None
        except AttributeError:
            return False

    def _restart_jvm(self) -> None:
        self._stop_jvm()
        self.restarts += 1
        self._start_jvm()

    def _stop_jvm(self) -> None:
        sw, self._sw = self._sw, None
        if sw is None:
            return
        proc = getattr(getattr(sw, "_gateway", None), "java_process", None)
        try:
            addr = f":{sw._gateway.gateway_parameters.port})"
            _DEAD_JVM_FILTER.dead_addresses.add(addr)
            _DEAD_JVM_FILTER.live.pop(addr, None)
        except AttributeError:
            pass
        try:
            sw._gateway.shutdown()
        except Exception:
            pass  # a dead JVM cannot acknowledge the shutdown
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.write(b"\n")
                proc.stdin.flush()
                proc.wait(timeout=5)
            except Exception:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=5)

    # -- variations ----------------------------------------------------------------------
    def _split_variations(self) -> list[int]:
        self._sw.load(self.task, 0, self.config.simplifications, generateGoldPath=False)
        getter = {"train": self._sw.get_variations_train, "dev": self._sw.get_variations_dev, "test": self._sw.get_variations_test}
        return [int(v) for v in getter[self.config.split]()]

    @property
    def variations(self) -> list[int]:
        """Absolute variation indices of the configured split."""
        return list(self._variations)

    def _check_variation(self, v: int) -> int:
        if v not in self._variations:
            lo, hi = (min(self._variations), max(self._variations)) if self._variations else (None, None)
            raise ValueError(
                f"variation: {v} is not in the {self.config.split!r} split of {self.task!r} "
                f"({len(self._variations)} variations, {lo}..{hi})"
            )
        return v

    # -- protocol ------------------------------------------------------------------------
    def _reset(self, variation: int | None = None) -> tuple[str, dict[str, Any]]:
        if variation is not None:
            v = self._check_variation(int(variation))
        elif self.config.variation is not None:
            v = int(self.config.variation)
        else:
            v = self._variations[self._cycle % len(self._variations)]
            self._cycle += 1
        try:
            obs, sw_info = self._load_and_reset(v)
        except Exception as exc:
            if not _is_connection_error(exc):
                raise
            self._restart_jvm()
            obs, sw_info = self._load_and_reset(v)
        self.variation = v
        self._t = 0
        self._on_path = True
        self._task_desc = str(sw_info.get("taskDesc", ""))
        info = self._info(sw_info, errored=False)
        info["restarts"] = self.restarts
        return obs, info

    def _load_and_reset(self, v: int) -> tuple[str, dict[str, Any]]:
        if self._loaded != v:
            self._sw.load(self.task, v, self.config.simplifications, generateGoldPath=self.config.gold_path)
            self._loaded = v
            self._gold = list(self._sw.get_gold_action_sequence()) if self.config.gold_path else []
        return self._sw.reset()

    def _info(self, sw_info: dict[str, Any], errored: bool) -> dict[str, Any]:
        score = float(sw_info.get("score", 0))
        return {
            "task": self._task_desc,
            "task_name": self.task,
            "variation": self.variation,
            "admissible": list(sw_info.get("valid", [])),
            "score": score,
            "won": score >= 100.0,
            "success": score >= 100.0,
            "moves": sw_info.get("moves"),
            "steps": self._t,
            "errored": errored,
        }

    def _step(self, action: Any) -> tuple[str, float, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(f"action: expected a text command (str), got {type(action).__name__}")
        if self._on_path and (self._t >= len(self._gold) or action.strip() != self._gold[self._t]):
            self._on_path = False
        try:
            obs, reward, done, sw_info = self._sw.step(action)
        except Exception as exc:
            if not _is_connection_error(exc):
                raise
            # The simulator is gone: this episode cannot continue, the run can.
            self._t += 1
            self._restart_jvm()
            info = self._info({}, errored=True)
            info["error"] = f"{type(exc).__name__}: {exc}"
            info["restarts"] = self.restarts
            return "", 0.0, True, info
        self._t += 1
        return obs, float(reward), bool(done), self._info(sw_info, errored=False)

    @property
    def gold_path(self) -> list[str]:
        """The loaded variation's gold action sequence."""
        return list(self._gold)

    def expert(self) -> str | None:
        """The gold path's next action while the episode has followed it so far, else None."""
        if self._on_path and self._t < len(self._gold):
            return self._gold[self._t]
        return None

    def close(self) -> None:
        self._stop_jvm()

    def __del__(self) -> None:
        try:
            self._stop_jvm()
        except Exception:
            pass


def probe(deep: bool = False) -> ProbeResult:
    """Whether this environment runs here (``metacog info``); ``deep`` also resets one episode."""
    details: dict[str, Any] = {"scienceworld": package_version("scienceworld"), "java": check_java()}
    details["tasks"] = len(task_names())
    if deep:
        env = ScienceWorldEnv(task="find-non-living-thing")
        _, info = env.reset()
        details["admissible_at_start"] = len(info["admissible"])
        env.close()
    return ProbeResult("scienceworld", True, "Java found, imports" + (", JVM started and reset" if deep else ""), details)
