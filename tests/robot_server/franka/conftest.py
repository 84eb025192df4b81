"""franky-sim on a random loopback address, started inside the test process."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from robot_server.robots.franka import FrankaConfig, FrankaRobot
from robot_server.robots.franka.fci_sim import FciSim, loopback_candidates


def sim_config(host: str, **overrides: object) -> FrankaConfig:
    """Non-real-time settings for franky-sim only; quicker homing than on the real arm."""
    fields: dict[str, object] = {
        "host": host,
        "realtime": "ignore",
        "home_dynamics_factor": 0.6,
        # Generous: a franky-sim on a loaded CI machine can take seconds to answer the handshake.
        "connect_timeout_s": 10.0,
        "stall_timeout_s": 1.5,
        "reconnect_interval_s": 0.2,
    }
    fields.update(overrides)
    return FrankaConfig(**fields)  # type: ignore[arg-type]


def unused_loopback() -> str:
    """A loopback address where nothing listens on the FCI port."""
    for host in loopback_candidates():
        with socket.socket() as s:
            try:
                s.bind((host, 1337))
            except OSError:
                continue
            return host
    raise RuntimeError("no free loopback address")


@pytest.fixture(scope="module")
def fci_sim() -> Iterator[FciSim]:
    sim = FciSim(realtime=True).start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def robot(fci_sim: FciSim) -> Iterator[FrankaRobot]:
    r = FrankaRobot(sim_config(fci_sim.host))
    r.connect()
    try:
        yield r
    finally:
        r.disconnect()
