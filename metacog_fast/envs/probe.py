"""Quick checks of which environments and data are usable here (``metacog info``)."""
from __future__ import annotations

import importlib.metadata
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from metacog_fast._registry import resolve
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


def package_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


PROBES: dict[str, str] = {
    "metaworld": "metacog_fast.metaworld.env:probe",
    "alfworld": "metacog_fast.alfworld.env:probe",
    "scienceworld": "metacog_fast.scienceworld.env:probe",
}
"""{environment: ``"module:function"``}; ``function(deep) -> ProbeResult``. Resolved when probed, so that
this floor imports no family."""


def _probe_function(name: str) -> Callable[[bool], ProbeResult]:
    return resolve(PROBES[name])



def probe_envs(deep: bool = False, names: list[str] | None = None) -> list[ProbeResult]:
    """Probe each environment; never raises: failures become ``usable=False`` with the reason."""
    out = []
    for name in names or list(PROBES):
        t0 = time.perf_counter()
        try:
            res = _probe_function(name)(deep)
        except EnvSetupError as exc:
            res = ProbeResult(name, False, str(exc))
        except ImportError as exc:
            res = ProbeResult(name, False, f"not importable: {exc}; reinstall with scripts/setup.sh")
        except Exception as exc:  # a probe must report, not crash `metacog info`
            res = ProbeResult(name, False, f"{type(exc).__name__}: {exc}")
        res.seconds = time.perf_counter() - t0
        out.append(res)
    return out
