"""``make_env(name, **options)``: the one way to build an adapter by name."""
from __future__ import annotations

from typing import Any, Callable

from metacog_fast.envs.base import Env


def _metaworld(**options: Any) -> Env:
    from metacog_fast.envs.metaworld_env import MetaWorldEnv

    return MetaWorldEnv(**options)


def _alfworld(**options: Any) -> Env:
    from metacog_fast.envs.alfworld_env import AlfWorldEnv

    return AlfWorldEnv(**options)


def _scienceworld(**options: Any) -> Env:
    from metacog_fast.envs.scienceworld_env import ScienceWorldEnv

    return ScienceWorldEnv(**options)


# Imports stay lazy: metaworld pulls MuJoCo, alfworld pulls textworld/spacy, scienceworld py4j.
ENV_FACTORIES: dict[str, Callable[..., Env]] = {
    "metaworld": _metaworld,
    "alfworld": _alfworld,
    "scienceworld": _scienceworld,
}


def make_env(name: str, **options: Any) -> Env:
    """Build an adapter.

    - ``"metaworld"``: ``task=`` (MT50 name, e.g. "reach-v3" or "soccer"), ``seed=``, ``randomize=``,
      ``one_hot_tasks=``, ``zero_task_embedding=``, ``max_episode_steps=``, ``terminate_on_success=``.
    - ``"alfworld"``: ``split=``, ``data=`` (folder), ``game=`` (index or path), ``max_episode_steps=``, ``cache_dir=``.
    - ``"scienceworld"``: ``task=`` (name, id or index 0-29), ``variation=``, ``split=``, ``simplifications=``,
      ``step_limit=``, ``gold_path=``.
    """
    try:
        factory = ENV_FACTORIES[name]
    except KeyError:
        raise ValueError(f"name: unknown environment {name!r}; expected one of {sorted(ENV_FACTORIES)}") from None
    try:
        return factory(**options)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc):
            raise ValueError(f"{name}: {exc}; see make_env's docstring for the options") from exc
        raise
