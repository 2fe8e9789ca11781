"""``make_env(name, **options)``: the one way to build an adapter by name."""
from __future__ import annotations

from typing import Any, Callable

from metacog_fast._registry import resolve
from metacog_fast.envs.base import Env


# "module:Class", imported when built: metaworld pulls MuJoCo, alfworld textworld/spacy, scienceworld
# py4j; and this floor imports no family.
ENV_FACTORIES: dict[str, str] = {
    "metaworld": "metacog_fast.metaworld.env:MetaWorldEnv",
    "alfworld": "metacog_fast.alfworld.env:AlfWorldEnv",
    "scienceworld": "metacog_fast.scienceworld.env:ScienceWorldEnv",
}


def make_env(name: str, **options: Any) -> Env:
    """Build an adapter.

    - ``"metaworld"``: ``task=`` (MT50 name, e.g. "reach-v3" or "soccer"), ``seed=``, ``randomize=``,
      ``one_hot_tasks=``, ``zero_task_embedding=``, ``max_episode_steps=``, ``terminate_on_success=``.
    - ``"alfworld"``: ``split=``, ``data=`` (folder), ``game=`` (index or path), ``max_episode_steps=``, ``cache_dir=``.
    - ``"scienceworld"``: ``task=`` (name, id or index 0-29), ``variation=``, ``split=``, ``simplifications=``,
      ``step_limit=``, ``gold_path=``.
    """
    if name not in ENV_FACTORIES:
        raise ValueError(f"name: unknown environment {name!r}; expected one of {sorted(ENV_FACTORIES)}")
    factory: Callable[..., Env] = resolve(ENV_FACTORIES[name])
    try:
        return factory(**options)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc):
            raise ValueError(f"{name}: {exc}; see make_env's docstring for the options") from exc
        raise
