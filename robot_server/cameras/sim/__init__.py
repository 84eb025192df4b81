"""A camera rendered from the simulated world."""

from robot_server.cameras.sim.camera_sim import SimCamera

__all__ = ["SimCamera"]
