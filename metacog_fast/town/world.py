"""The grid world: walkable cells, named locations (with rooms), static objects,
perception within a range and shortest-path movement.

Coordinates are ``(x, y)`` integer cells, ``0 <= x < width``, ``0 <= y < height``.
Distances for perception are Euclidean; movement is 4-neighbour along BFS
shortest paths (distance fields are computed once per target and cached).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Area:
    """A named rectangle of the map (a location or a room inside one)."""

    name: str
    """Unique name, e.g. ``"Cafe"`` or ``"Cafe kitchen"``."""
    bounds: tuple[int, int, int, int]
    """Inclusive cell rectangle ``(x0, y0, x1, y1)``."""
    description: str = ""
    """Free text given to agents when they are there."""
    parent: str | None = None
    """For a room: the location it belongs to."""

    def contains(self, x: int, y: int) -> bool:
        x0, y0, x1, y1 = self.bounds
        return x0 <= x <= x1 and y0 <= y <= y1


@dataclass(frozen=True)
class WorldObject:
    """A static object agents can use."""

    name: str
    """Unique name, e.g. ``"coffee machine"``."""
    pos: tuple[int, int]
    """Cell of the object."""
    actions: tuple[str, ...] = ("use",)
    """Verbs offered to agents next to it (``"use"``, ``"read"``...)."""
    description: str = ""
    """Free text."""


@dataclass
class World:
    """A loaded world. Build with :func:`metacog_fast.town.loader.load_world`."""

    name: str
    """World name."""
    walkable: np.ndarray
    """[H, W] bool: cells agents may stand on."""
    locations: list[Area]
    """Top-level named areas."""
    rooms: list[Area] = field(default_factory=list)
    """Named sub-areas (``parent`` = their location)."""
    objects: list[WorldObject] = field(default_factory=list)
    """Static objects."""
    _fields: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def height(self) -> int:
        return int(self.walkable.shape[0])

    @property
    def width(self) -> int:
        return int(self.walkable.shape[1])

    def location(self, name: str) -> Area:
        """The location called ``name`` (KeyError naming the known ones otherwise)."""
        for a in self.locations:
            if a.name == name:
                return a
        raise KeyError(f"location {name!r} not in world {self.name!r}; known: {[a.name for a in self.locations]}")

    def location_at(self, x: int, y: int) -> str | None:
        """Name of the location containing cell (x, y), or ``None`` (outdoors between places)."""
        for a in self.locations:
            if a.contains(x, y):
                return a.name
        return None

    def room_at(self, x: int, y: int) -> str | None:
        for a in self.rooms:
            if a.contains(x, y):
                return a.name
        return None

    def cells_of(self, name: str) -> list[tuple[int, int]]:
        """Walkable cells of location ``name``."""
        x0, y0, x1, y1 = self.location(name).bounds
        return [(x, y) for y in range(y0, y1 + 1) for x in range(x0, x1 + 1) if self.walkable[y, x]]

    def distance_field(self, targets: tuple[tuple[int, int], ...], blocked: np.ndarray | None = None,
                       key: tuple | None = None) -> np.ndarray:
        """[H, W] int32 BFS steps to the nearest target cell over walkable cells (-1 = unreachable).

        ``blocked`` [H, W] bool marks extra impassable cells (e.g. zombie-free areas for zombies);
        results are cached under ``key`` when one is given.
        """
        if key is not None and key in self._fields:
            return self._fields[key]
        H, W = self.walkable.shape
        passable = self.walkable if blocked is None else (self.walkable & ~blocked)
        dist = np.full((H, W), -1, np.int32)
        q: deque[tuple[int, int]] = deque()
        for x, y in targets:
            if passable[y, x] and dist[y, x] < 0:
                dist[y, x] = 0
                q.append((x, y))
        while q:
            x, y = q.popleft()
            d = dist[y, x] + 1
            for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
                if 0 <= nx < W and 0 <= ny < H and passable[ny, nx] and dist[ny, nx] < 0:
                    dist[ny, nx] = d
                    q.append((nx, ny))
        if key is not None:
            self._fields[key] = dist
        return dist

    def location_field(self, name: str) -> np.ndarray:
        """Cached distance field to location ``name``."""
        return self.distance_field(tuple(self.cells_of(name)), key=("loc", name))

    def step_towards(self, pos: tuple[int, int], dist: np.ndarray, steps: int = 1,
                     occupied: set[tuple[int, int]] | None = None) -> tuple[int, int]:
        """Walk up to ``steps`` cells downhill on ``dist`` from ``pos`` (stays put when unreachable)."""
        x, y = pos
        H, W = dist.shape
        for _ in range(steps):
            d0 = dist[y, x]
            if d0 <= 0:
                break
            best = None
            for nx, ny in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)):
                if 0 <= nx < W and 0 <= ny < H and 0 <= dist[ny, nx] < d0:
                    if occupied is not None and (nx, ny) in occupied:
                        continue
                    best = (nx, ny)
                    break
            if best is None:
                break
            x, y = best
        return (x, y)

    def objects_near(self, x: int, y: int, radius: float) -> list[WorldObject]:
        return [o for o in self.objects if (o.pos[0] - x) ** 2 + (o.pos[1] - y) ** 2 <= radius * radius]


def visible_pairs(observer_xy: np.ndarray, target_xy: np.ndarray, radius: float) -> np.ndarray:
    """[N, M] bool: target j is within Euclidean ``radius`` of observer i (one vectorised pass).

    observer_xy [N, 2], target_xy [M, 2] integer or float cell coordinates.
    """
    o = np.asarray(observer_xy, np.float32).reshape(-1, 2)
    t = np.asarray(target_xy, np.float32).reshape(-1, 2)
    d2 = ((o[:, None, :] - t[None, :, :]) ** 2).sum(-1)
    return d2 <= np.float32(radius * radius)
