"""Scenario actors and rules that need no LLM: the zombie horde.

Zombies are non-player characters: each step a zombie that sees a living agent
(within ``zombie_range``, Euclidean) steps toward the nearest one, otherwise it
wanders to a random free neighbour cell; it never enters a zombie-free location.
After moving, every living agent outside the zombie-free locations within
``kill_range`` of a zombie is killed.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from metacog_fast.town.world import World, visible_pairs

_DIRS = ((1, 0), (-1, 0), (0, 1), (0, -1))


@dataclass
class ZombieRules:
    """Zombie parameters (from the scenario's ``rules``)."""

    count: int = 3
    """Zombies at the start."""
    sight: float = 5.0
    """Range at which a zombie sees an agent."""
    kill_range: float = 1.0
    """Distance at which a zombie kills an agent (1 = adjacent)."""
    speed: int = 1
    """Cells per step."""


class ZombieHorde:
    """Positions [Z, 2] of the zombies and their per-step update."""

    def __init__(self, world: World, rules: ZombieRules, zombie_free: list[str], starts: list[str],
                 rng: random.Random) -> None:
        self.world, self.rules, self.rng = world, rules, rng
        self.safe = np.zeros(world.walkable.shape, bool)
        for name in zombie_free:
            x0, y0, x1, y1 = world.location(name).bounds
            self.safe[y0: y1 + 1, x0: x1 + 1] = True
        self.free = world.walkable & ~self.safe
        cells: list[tuple[int, int]] = []
        for name in starts or [a.name for a in world.locations if a.name not in zombie_free]:
            cells += [c for c in world.cells_of(name) if self.free[c[1], c[0]]]
        if rules.count and not cells:
            raise ValueError("rules.zombie_start: no cell where a zombie may stand")
        self.pos = np.array([rng.choice(cells) for _ in range(rules.count)], np.int32).reshape(-1, 2)

    def in_safe(self, xy: np.ndarray) -> np.ndarray:
        xy = np.asarray(xy, np.int32).reshape(-1, 2)
        return self.safe[xy[:, 1], xy[:, 0]]

    def step(self, agent_xy: np.ndarray, alive: np.ndarray) -> list[int]:
        """Move every zombie, then return the indices of the agents killed this step.

        agent_xy [N, 2] int, alive [N] bool.
        """
        H, W = self.free.shape
        targets = np.flatnonzero(alive & ~self.in_safe(agent_xy)) if len(agent_xy) else np.empty(0, np.int64)
        for _ in range(self.rules.speed):
            seen = visible_pairs(self.pos, agent_xy[targets], self.rules.sight) if len(targets) else None
            for z in range(len(self.pos)):
                x, y = int(self.pos[z, 0]), int(self.pos[z, 1])
                moves = [(x + dx, y + dy) for dx, dy in _DIRS
                         if 0 <= x + dx < W and 0 <= y + dy < H and self.free[y + dy, x + dx]]
                if not moves:
                    continue
                if seen is not None and seen[z].any():
                    cand = agent_xy[targets[seen[z]]]
                    d2 = ((cand - self.pos[z]) ** 2).sum(1)
                    tx, ty = cand[int(np.argmin(d2))]
                    self.pos[z] = min(moves, key=lambda m: (m[0] - tx) ** 2 + (m[1] - ty) ** 2)
                else:
                    self.pos[z] = self.rng.choice(moves)
        if not len(targets) or not len(self.pos):
            return []
        near = visible_pairs(agent_xy[targets], self.pos, self.rules.kill_range).any(1)
        return [int(i) for i in targets[near]]


def flee_cell(world: World, pos: tuple[int, int], threats: np.ndarray, steps: int) -> tuple[int, int]:
    """The cell up to ``steps`` moves away that maximises the distance to the nearest threat [T, 2]."""
    x, y = pos
    H, W = world.walkable.shape
    for _ in range(steps):
        best, best_d = (x, y), float(((threats - (x, y)) ** 2).sum(1).min()) if len(threats) else 0.0
        for dx, dy in _DIRS:
            nx, ny = x + dx, y + dy
            if 0 <= nx < W and 0 <= ny < H and world.walkable[ny, nx]:
                d = float(((threats - (nx, ny)) ** 2).sum(1).min()) if len(threats) else 0.0
                if d > best_d:
                    best, best_d = (nx, ny), d
        if best == (x, y):
            break
        x, y = best
    return (x, y)
