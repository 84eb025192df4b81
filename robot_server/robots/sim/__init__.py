"""The simulated FR3 backend (MuJoCo)."""

from robot_server.robots.sim.robot_sim import SimRobot

__all__ = ["SimRobot"]
