"""Registry of ``metacog demo`` parts.

A part drives something end to end (an environment with its expert today; agents later)
and returns a JSON-able dict of figures, with ``"model"``: what drove it and where its weights
came from (:func:`model_info`). To add one:

    from metacog_fast.cli.demo_registry import DemoPart, PositiveInt, register_demo_part

    @dataclass
    class MyAgentDemo:
        episodes: PositiveInt = 2
        # Episodes to play: --myagent-episodes, read as args.myagent_episodes

    def _run(args, progress):  ...; return {"success_rate": ...}

    register_demo_part(DemoPart("myagent", "what it shows", MyAgentDemo, _run, default=False))

and import the module from :mod:`metacog_fast.cli.demo` (``PART_MODULES``).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Annotated, Any, Callable

from tyro.constructors import PrimitiveConstructorSpec

from metacog_fast.envs.base import Env

ProgressFactory = Callable[..., Any]
"""``progress(total=..., desc=...)`` -> a tqdm-like bar (``update``, ``set_postfix_str``, ``close``)."""


@dataclass
class DemoPart:
    """One runnable part of ``metacog demo``."""

    name: str
    """Name used on the command line (``--parts name,...``) and as the key in the JSON output."""
    help: str
    """One line shown in ``metacog demo --help``."""
    options: type
    """The dataclass of the part's own options; ``metacog demo`` composes them all, each field
    ``f`` of part ``name`` spelled ``--<name>-<f>`` (help: the field docstring)."""
    run: Callable[[argparse.Namespace, ProgressFactory], dict[str, Any]]
    """Runs the part with the demo's options (``args.seed``, ``args.out``, ``args.<name>_<f>``);
    returns its figures (JSON-able)."""
    default: bool = True
    """Run when ``--parts`` is not given."""
    quick: bool = False
    """Run under ``--quick`` (the environment checks only, under a minute)."""
    needs: tuple[str, ...] = ()
    """Environments (as ``metacog info`` names them) the part needs. When one is not usable
    here (no ALFWorld games, no Java, ...) the demo skips the part and prints the probe's reason."""


DEMO_PARTS: dict[str, DemoPart] = {}


def register_demo_part(part: DemoPart) -> DemoPart:
    if part.name in DEMO_PARTS:
        raise ValueError(f"demo part {part.name!r} is already registered")
    DEMO_PARTS[part.name] = part
    return part


MODEL_KINDS = ("scripted expert", "shipped", "trained in the demo", "base model", "untrained")
"""Where a part's policy comes from. ``untrained`` parts show a control loop, not a result."""


def model_info(name: str, kind: str, note: str = "") -> dict[str, str]:
    """The ``"model"`` entry of a part's figures: ``name`` (what acted), ``kind`` (one of
    :data:`MODEL_KINDS`) and a ``note`` (what it measured, or why its numbers mean nothing)."""
    if kind not in MODEL_KINDS:
        raise ValueError(f"kind: expected one of {MODEL_KINDS}, got {kind!r}")
    return {"name": name, "kind": kind, "note": note}


# -- shared by the parts that check an environment with its expert --------------------------

def csv_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ValueError(f"expected an integer >= 1, got {text!r}") from None
    if v < 1:
        raise ValueError(f"expected an integer >= 1, got {text}")
    return v


PositiveInt = Annotated[int, PrimitiveConstructorSpec(
    nargs=1, metavar="INT>=1", instance_from_str=lambda words: positive_int(words[0]),
    is_instance=lambda v: isinstance(v, int) and v >= 1, str_from_instance=lambda v: [str(v)])]
"""An option field read by tyro as an integer >= 1 (a bad value is an error naming the flag)."""


def expert_summary(envs: list[Env], episodes: list[dict[str, Any]], wall: float, expert: str) -> dict[str, Any]:
    """Success over ``episodes``; step and reset rates from the adapters' own timings."""
    n = len(episodes)
    steps = sum(e.timings.steps for e in envs)
    step_s = sum(e.timings.step_seconds for e in envs)
    resets = sum(e.timings.resets for e in envs)
    reset_s = sum(e.timings.reset_seconds for e in envs)
    return {
        "model": model_info(expert, "scripted expert",
                            "the environment's own solution, a check of the install, not an agent"),
        "episodes": episodes,
        "n_episodes": n,
        "success_rate": sum(e["success"] for e in episodes) / n if n else 0.0,
        "steps_per_second": steps / step_s if step_s else 0.0,
        "mean_reset_seconds": reset_s / resets if resets else 0.0,
        "timings": {"steps": steps, "step_seconds": step_s, "resets": resets, "reset_seconds": reset_s},
        "wall_seconds": wall,
    }


def expert_policy(env: Env) -> Callable[[Any, dict[str, Any]], Any]:
    """``env``'s own expert as a :func:`metacog_fast.envs.play` policy (``None`` when its plan runs
    out ends the episode)."""
    return lambda obs, info: env.expert()
