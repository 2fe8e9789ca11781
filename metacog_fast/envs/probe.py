"""Quick checks of which environments and data are usable here (``metacog info``)."""
from __future__ import annotations

import importlib.metadata
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from metacog_fast.envs.base import EnvSetupError


@dataclass
class ProbeResult:
    """Outcome of probing one environment."""

    name: str
    """Environment name as ``make_env`` takes it."""
    usable: bool
    """True when the adapter can run here."""
    reason: str = ""
    """Why not (with the fix), or what was checked."""
    details: dict[str, Any] = field(default_factory=dict)
    """Versions, data counts, timings."""
    seconds: float = 0.0
    """Wall time of the probe."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_metaworld(deep: bool = False) -> ProbeResult:
    details: dict[str, Any] = {"metaworld": _version("metaworld"), "mujoco": _version("mujoco")}
    from metacog_fast.envs.metaworld_env import MT10_TASKS, all_task_names

    details["tasks"] = len(all_task_names())
    if deep:
        from metacog_fast.envs.metaworld_env import MetaWorldEnv

        env = MetaWorldEnv(task=MT10_TASKS[0])
        obs, _ = env.reset()
        env.step(env.expert())
        details["observation_dim"] = int(obs.shape[0])
        env.close()
    return ProbeResult("metaworld", True, "imports" + (", reset and step" if deep else ""), details)


def probe_alfworld(deep: bool = False) -> ProbeResult:
    details: dict[str, Any] = {"alfworld": _version("alfworld"), "textworld": _version("textworld")}
    import fast_downward  # noqa: F401  (textworld[pddl])
    import textworld  # noqa: F401

    from metacog_fast.envs.alfworld_env import find_split_dir, list_games

    games: dict[str, int] = {}
    for split in ("train", "valid_seen", "valid_train", "valid_unseen"):
        try:
            games[split] = len(list_games(split))
        except EnvSetupError as exc:
            if split == "valid_seen":
                raise
            del exc
    details["games"] = games
    details["data"] = str(find_split_dir("valid_seen").parent)
    if deep:
        from metacog_fast.envs.alfworld_env import AlfWorldEnv

        env = AlfWorldEnv(game=0)
        _, info = env.reset()
        details["admissible_at_start"] = len(info["admissible"])
        env.close()
    return ProbeResult("alfworld", True, "imports and games found" + (", reset" if deep else ""), details)


def probe_scienceworld(deep: bool = False) -> ProbeResult:
    from metacog_fast.envs.scienceworld_env import check_java, task_names

    details: dict[str, Any] = {"scienceworld": _version("scienceworld"), "java": check_java()}
    details["tasks"] = len(task_names())
    if deep:
        from metacog_fast.envs.scienceworld_env import ScienceWorldEnv

        env = ScienceWorldEnv(task="find-non-living-thing")
        _, info = env.reset()
        details["admissible_at_start"] = len(info["admissible"])
        env.close()
    return ProbeResult("scienceworld", True, "Java found, imports" + (", JVM started and reset" if deep else ""), details)


PROBES: dict[str, Callable[[bool], ProbeResult]] = {
    "metaworld": probe_metaworld,
    "alfworld": probe_alfworld,
    "scienceworld": probe_scienceworld,
}


def probe_envs(deep: bool = False, names: list[str] | None = None) -> list[ProbeResult]:
    """Probe each environment; never raises: failures become ``usable=False`` with the reason."""
    out = []
    for name in names or list(PROBES):
        t0 = time.perf_counter()
        try:
            res = PROBES[name](deep)
        except EnvSetupError as exc:
            res = ProbeResult(name, False, str(exc))
        except ImportError as exc:
            res = ProbeResult(name, False, f"not importable: {exc}; reinstall with scripts/setup.sh")
        except Exception as exc:  # a probe must report, not crash `metacog info`
            res = ProbeResult(name, False, f"{type(exc).__name__}: {exc}")
        res.seconds = time.perf_counter() - t0
        out.append(res)
    return out
