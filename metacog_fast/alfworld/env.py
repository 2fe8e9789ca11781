"""ALFWorld text games (json_2.1.1 ``game.tw-pddl`` folders) behind the common protocol.

Data folder: the ``data=`` option if given; else the first of ``$ALFWORLD_DATA``,
``<repo>/data/alfworld`` that holds the split.
It must hold ``json_2.1.1/<split>/<task folder>/<trial>/game.tw-pddl`` (the layout of
``alfworld-download`` and of ``../shared/data/alfworld/json_2.1.1-dev.tar.xz``); a folder
that directly holds the split folders works too.

Each game runs through textworld with exactly the wrapper stack that
``textworld.gym.register_games([game], EnvInfos(won=True, admissible_commands=True,
extras=["gamefile"]), max_episode_steps=50, wrappers=[AlfredDemangler(), AlfredInfos])``
builds (GenericEnvironment -> Limit(50) -> AlfredDemangler -> AlfredInfos -> Filter), made
directly so that a loaded game can be reset without being parsed again. No AlfredExpert
(it needs ``traj_data.json``, which these folders do not ship): the expert is the game's
own ``walkthrough``.

Reset cost: see :mod:`metacog_fast.alfworld.cache`. Reset of the game already
loaded skips the load (JSON, grammar and domain parse); the PDDL translation of any game
seen before in this process (or in ``cache_dir``) comes from the translation cache.
``info["cache"]`` reports per reset whether the game was reloaded and the translation
hits/misses.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metacog_fast._extras import require
from metacog_fast.envs.base import Env, EnvSetupError
from metacog_fast.envs.probe import ProbeResult, package_version

SPLITS = ("train", "valid_seen", "valid_train", "valid_unseen", "heldout_rooms")
HELDOUT_ROOMS = "heldout_rooms"
"""A split of our own, for evaluation only: the ``train`` games of the held-out scenes
(:mod:`metacog_fast.alfworld.splits`); a model trained with ``--exclude-heldout-rooms`` has never
seen those rooms."""
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
_REPO_DATA = Path(__file__).resolve().parents[2] / "data" / "alfworld"
_TARBALL = Path(__file__).resolve().parents[3] / "shared" / "data" / "alfworld" / "json_2.1.1-dev.tar.xz"
_DOWNLOAD_DATA = Path.home() / ".cache" / "alfworld"
"""Where ``alfworld-download`` (the alfworld package's own command) puts the games by default."""


def _missing_data_message(tried: list[Path]) -> str:
    fix = (
        f"mkdir -p {_REPO_DATA} && tar -xJf {_TARBALL} -C {_REPO_DATA}"
        if _TARBALL.exists()
        else f"run `alfworld-download` (the alfworld package's download command, needs internet; it writes "
        f"{_DOWNLOAD_DATA}/json_2.1.1, found here without further setting, or $ALFWORLD_DATA/json_2.1.1 when set)"
    )
    return (
        "ALFWorld games not found (looked for json_2.1.1/<split>/*/*/game.tw-pddl in "
        + ", ".join(str(p) for p in tried)
        + f"). Fix: {fix}; or pass data=<folder> / set ALFWORLD_DATA=<folder> (scripts/setup.sh does the unpacking)."
    )


def find_split_dir(split: str, data: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding ``<task folder>/<trial>/game.tw-pddl`` for ``split``; raises EnvSetupError."""
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {SPLITS}, got {split!r}")
    if split == HELDOUT_ROOMS:
        split = "train"
    roots: list[Path] = []
    if data is not None:
        roots.append(Path(data))
    else:
        # Importing alfworld sets ALFWORLD_DATA to ~/.cache/alfworld when it was unset, so an
        # ALFWORLD_DATA without games falls through to the repository's data folder.
        if os.environ.get("ALFWORLD_DATA"):
            roots.append(Path(os.environ["ALFWORLD_DATA"]))
        for default in (_REPO_DATA, _DOWNLOAD_DATA):
            if default not in roots:
                roots.append(default)
    for root in roots:
        for cand in (root / "json_2.1.1" / split, root / split):
            if cand.is_dir():
                return cand
    if any((r / "json_2.1.1").is_dir() for r in roots):
        have = sorted(p.name for r in roots if (r / "json_2.1.1").is_dir()
                      for p in (r / "json_2.1.1").iterdir() if p.is_dir())
        raise EnvSetupError(f"split: {split!r} is not in the ALFWorld data folder (it has {have})")
    raise EnvSetupError(_missing_data_message(roots))


def list_games(split: str = "valid_seen", data: str | os.PathLike[str] | None = None) -> list[Path]:
    """All ``game.tw-pddl`` files of a split, sorted (the order ``game=<index>`` refers to)."""
    split_dir = find_split_dir(split, data)
    games = sorted(Path(p) for p in glob.glob(str(split_dir / "*" / "*" / "game.tw-pddl")))
    if not games:
        raise EnvSetupError(f"no game.tw-pddl under {split_dir}/*/*/: " + _missing_data_message([split_dir]))
    if split == HELDOUT_ROOMS:
        from metacog_fast.alfworld.splits import heldout_scenes, in_heldout_rooms

        scenes = heldout_scenes()
        games = [g for g in games if in_heldout_rooms(g, scenes)]
    return games


def task_type_of(gamefile: str | os.PathLike[str]) -> str:
    """``.../pick_clean_then_place_in_recep-Bowl-None-Cabinet-10/trial_x/game.tw-pddl`` -> ``pick_clean_then_place_in_recep``."""
    return Path(gamefile).parent.parent.name.split("-", 1)[0]


def _task_text(observation: str) -> str:
    marker = "Your task is to: "
    i = observation.find(marker)
    return observation[i + len(marker):].strip() if i >= 0 else ""


def make_textworld_gym_env(gamefile: str | os.PathLike[str], max_episode_steps: int = 50) -> Any:
    """The plain textworld gym env of one game, exactly as the data README runs it (no cache of
    loaded games; reset re-parses): the anchor for tests and benchmarks."""
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    env_id = textworld.gym.register_games(
        [str(gamefile)], infos, max_episode_steps=max_episode_steps, wrappers=[AlfredDemangler(), AlfredInfos]
    )
    return textworld.gym.make(env_id)


@dataclass
class AlfWorldConfig:
    """Options of :class:`AlfWorldEnv` (``make_env("alfworld", **options)``)."""

    split: str = "valid_seen"
    """Split folder: train, valid_seen, valid_train (valid_unseen if the data folder has it)."""
    data: str | None = None
    """Data folder (see module docstring); None = $ALFWORLD_DATA, then <repo>/data/alfworld."""
    game: int | str | None = None
    """Index into the sorted game list of the split, or a path to a game.tw-pddl; None = cycle through the split."""
    max_episode_steps: int = 50
    """Episode limit (done=True after this many steps; success is still only info["won"])."""
    cache_dir: str | None = None
    """Folder for the on-disk PDDL translation cache (None = memory only)."""
    handcoded_expert: bool = False
    """Run ALFWorld's hand-coded searching expert beside the game (it needs the game's facts, so
    textworld is asked for them): :meth:`AlfWorldEnv.handcoded_action` is its next command from the
    current state, whatever commands led there (:mod:`metacog_fast.alfworld.expert`)."""


class AlfWorldEnv(Env):
    """One ALFWorld game at a time. ``reset(game=...)`` switches game (index or path)."""

    name = "alfworld"

    def __init__(self, config: AlfWorldConfig | None = None, **options: Any) -> None:
        super().__init__()
        cfg = config or AlfWorldConfig(**options)
        if cfg.max_episode_steps < 1:
            raise ValueError(f"max_episode_steps: expected >= 1, got {cfg.max_episode_steps}")
        self.config = cfg
        try:
            import textworld
            from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
            from textworld.envs.wrappers import Filter, GenericEnvironment, Limit
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EnvSetupError(
                f"the ALFWorld environment needs the [alfworld] extra ({exc}): pip install 'metacog_fast[alfworld]'"
            ) from exc
        self.games = list_games(cfg.split, cfg.data)
        from metacog_fast.alfworld import cache as alfworld_cache

        self.cache = alfworld_cache.install(cfg.cache_dir)
        infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=cfg.handcoded_expert, extras=["gamefile"])
        tw_env: Any = Limit(GenericEnvironment(infos), max_episode_steps=cfg.max_episode_steps)
        for wrapper in (AlfredDemangler(), AlfredInfos, Filter):
            tw_env = wrapper(tw_env)
        self._tw = tw_env
        self._fixed_game = self._resolve_game(cfg.game) if cfg.game is not None else None
        self._cycle = 0
        self.gamefile: Path | None = None
        self._walkthrough: list[str] = []
        self._on_path = True
        self._t = 0
        self._task = ""
        self._expert: Any = None
        self._expert_action: str | None = None

    def _resolve_game(self, game: int | str | os.PathLike[str]) -> Path:
        if isinstance(game, bool):
            raise ValueError(f"game: expected an index or a path to game.tw-pddl, got {game!r}")
        if isinstance(game, int) or (isinstance(game, str) and game.isdigit()):
            i = int(game)
            if not 0 <= i < len(self.games):
                raise ValueError(f"game: index {i} out of range for split {self.config.split!r} ({len(self.games)} games)")
            return self.games[i]
        path = Path(game)
        if path.is_dir():
            path = path / "game.tw-pddl"
        if not path.is_file():
            raise ValueError(f"game: {str(game)!r} is neither a game index nor an existing game.tw-pddl file")
        return path

    def _load(self, gamefile: Path) -> None:
        try:
            with open(gamefile) as f:
                data = json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"game: {gamefile} is not valid JSON ({exc})") from exc
        missing = [k for k in ("pddl_domain", "grammar", "pddl_problem") if k not in data]
        if missing:
            raise ValueError(f"game: {gamefile} lacks {missing}; expected a json_2.1.1 game.tw-pddl")
        self._tw.load(str(gamefile))
        self._walkthrough = list(data.get("walkthrough") or [])
        self.gamefile = gamefile

    def _reset(self, game: int | str | None = None) -> tuple[str, dict[str, Any]]:
        if game is not None:
            target = self._resolve_game(game)
        elif self._fixed_game is not None:
            target = self._fixed_game
        else:
            target = self.games[self._cycle % len(self.games)]
            self._cycle += 1
        stats = self.cache.stats
        hits0, misses0 = stats.hits, stats.misses
        reloaded = target != self.gamefile
        if reloaded:
            self._load(target)
        obs, tw_info = self._tw.reset()
        self._t = 0
        self._on_path = True
        self._task = _task_text(obs)
        info = self._info(tw_info)
        if self.config.handcoded_expert:
            from metacog_fast.alfworld.expert import HandcodedExpert

            self._expert = HandcodedExpert(target)
            self._expert_action = self._expert.start(obs, info["admissible"], tw_info["facts"])
        info["cache"] = {
            "game_reloaded": reloaded,
            "translation_hits": stats.hits - hits0,
            "translation_misses": stats.misses - misses0,
        }
        return obs, info

    def _info(self, tw_info: dict[str, Any]) -> dict[str, Any]:
        won = bool(tw_info["won"])
        return {
            "task": self._task,
            "task_type": task_type_of(self.gamefile) if self.gamefile else "",
            "admissible": list(tw_info["admissible_commands"]),
            "won": won,
            "success": won,
            "score": 1.0 if won else 0.0,
            "gamefile": str(self.gamefile),
            "steps": self._t,
        }

    def _step(self, action: Any) -> tuple[str, float, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(f"action: expected a text command (str), got {type(action).__name__}")
        if self._on_path and (self._t >= len(self._walkthrough) or action.strip() != self._walkthrough[self._t]):
            self._on_path = False
        obs, score, done, tw_info = self._tw.step(action)
        self._t += 1
        info = self._info(tw_info)
        if self._expert is not None:
            self._expert_action = self._expert.after_step(action, obs, info["admissible"], tw_info["facts"], info["won"])
        return obs, float(score), bool(done), info

    @property
    def walkthrough(self) -> list[str]:
        """The current game's expert action list (wins the game from its start)."""
        return list(self._walkthrough)

    def expert(self) -> str | None:
        """The walkthrough's next command while the episode has followed it so far, else None."""
        if self._on_path and self._t < len(self._walkthrough):
            return self._walkthrough[self._t]
        return None

    def handcoded_action(self) -> str | None:
        """The hand-coded expert's next command from the current state (None: it has given up, or
        the game is won). Needs ``handcoded_expert=True``."""
        if not self.config.handcoded_expert:
            raise RuntimeError("handcoded_action: the environment was made without handcoded_expert=True")
        if self._expert is None:
            raise RuntimeError("handcoded_action: call reset() first")
        return self._expert_action

    def close(self) -> None:
        self._tw.close()


def probe(deep: bool = False) -> ProbeResult:
    """Whether this environment runs here (``metacog info``); ``deep`` also resets one episode."""
    details: dict[str, Any] = {"alfworld": package_version("alfworld"), "textworld": package_version("textworld")}
    require("alfworld", "alfworld", "the ALFWorld environment")
    import fast_downward  # noqa: F401  (textworld[pddl])
    import textworld  # noqa: F401

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
        env = AlfWorldEnv(game=0)
        _, info = env.reset()
        details["admissible_at_start"] = len(info["admissible"])
        env.close()
    return ProbeResult("alfworld", True, "imports and games found" + (", reset" if deep else ""), details)
