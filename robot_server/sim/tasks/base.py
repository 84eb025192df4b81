"""The Task ABC: a name, a canonical prompt, a seeded layout and a success check."""

from __future__ import annotations

import abc

import numpy as np

from robot_server.sim.world import SimWorld


class Task(abc.ABC):
    name: str
    prompt: str

    @abc.abstractmethod
    def reset(self, world: SimWorld, rng: np.random.Generator) -> None:
        """Lay out the scene in ``world.data`` (called with the world lock held, after a physics
        reset and before ``mj_forward``)."""

    @abc.abstractmethod
    def success(self, world: SimWorld) -> bool:
        """Does the current simulator state satisfy the task? (world lock held)"""
