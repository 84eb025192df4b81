"""The real FR3 backend (franky-control). ``fci_sim`` serves a simulated FR3 for tests."""

from robot_server.robots.franka.config import FrankaConfig
from robot_server.robots.franka.robot import FrankaRobot

__all__ = ["FrankaConfig", "FrankaRobot"]
