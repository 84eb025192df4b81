"""`pde robot-server --backend franka` as a subprocess against franky-sim: the whole real path
(RobotClient -> server -> safety -> FrankaRobot -> franky -> libfranka -> FCI protocol)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from pde_contract.client import RobotClient, RobotServerError
from pde_contract.messages import ActionChunk, ActionSpace, ErrorCode
from robot_server.robots.franka.fci_sim import FciSim
from tests.robot_server.franka.server_proc import RATE_HZ, start_franka_server


def _chunk(seq: int, rows: int, dz_m: float) -> ActionChunk:
    a = np.zeros((rows, 7), np.float64)
    a[:, 2] = dz_m
    a[:, 6] = 0.08
    return ActionChunk(
        seq=seq, episode_id="ep", action_space=ActionSpace.EE_DELTA, actions=a, control_rate_hz=RATE_HZ
    )


@pytest.fixture(scope="module")
def server() -> Iterator[RobotClient]:
    with FciSim(realtime=True) as sim:
        srv = start_franka_server(sim.host)
        try:
            srv.client.reset(timeout_s=180.0)
            yield srv.client
        finally:
            srv.stop()


def _z(client: RobotClient) -> float:
    state = client.status().state
    assert state is not None
    return float(state.ee_position_m[2])


def _wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    """franky-sim runs well below real time on a loaded machine: wait for the effect, not a time."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _z_at_rest(client: RobotClient, what: str, timeout_s: float = 10.0) -> float:
    """The TCP height once the arm has come to rest (six readings over 0.5 s within 0.3 mm): a
    stop decelerates first, may settle back a few mm onto the pose held when it began (a single
    pair of readings can catch that turnaround), and on a loaded machine franky-sim runs all of it
    slower than real time."""
    deadline = time.monotonic() + timeout_s
    zs = [_z(client)]
    while True:
        time.sleep(0.1)
        zs = [*zs[-5:], _z(client)]
        if len(zs) == 6 and max(zs) - min(zs) < 0.0003:
            return zs[-1]
        assert time.monotonic() < deadline, f"{what}: the arm was still moving after {timeout_s} s"


def test_chunk_moves_the_arm_and_estop_latches(server: RobotClient) -> None:
    client = server
    client.release_estop()
    client.start_heartbeat(period_s=0.05)
    try:
        z0 = _z(client)
        client.submit_chunk(_chunk(1, rows=10, dz_m=0.004))  # 4 cm up over 1 s
        _wait_until(lambda: _z(client) - z0 > 0.03, "the arm did not rise 3 cm")
        time.sleep(0.5)
        z1 = _z(client)
        client.submit_chunk(_chunk(2, rows=30, dz_m=-0.003))  # 9 cm down over 3 s
        _wait_until(lambda: z1 - _z(client) > 0.005, "the arm did not start down")
        z_sent = _z(client)
        client.estop("test")
        z_stop = _z_at_rest(client, "after the e-stop")
        time.sleep(0.8)
        assert abs(_z(client) - z_stop) < 0.002, "the arm kept moving after the e-stop"
        # At 3 cm/s it stops within a few mm of where the e-stop found it; the chunk had 8 cm left.
        assert z_sent - z_stop < 0.03, "the rest of the chunk ran"
        with pytest.raises(RobotServerError) as info:
            client.submit_chunk(_chunk(3, rows=5, dz_m=0.001))
        assert info.value.code is ErrorCode.ESTOPPED
        status = client.status()
        assert status.estopped and status.connected
    finally:
        client.stop_heartbeat()
        client.release_estop()


def test_watchdog_holds_the_arm_when_heartbeats_stop(server: RobotClient) -> None:
    client = server
    # Polled by another client: the controlling client's own requests would feed the watchdog.
    with RobotClient(client.cmd_endpoint, name="observer", timeout_s=2.0) as observer:
        trips = observer.status().counters.watchdog_trips
        z0 = _z(observer)
        client.submit_chunk(_chunk(10, rows=40, dz_m=0.002))  # 8 cm over 4 s, no heartbeat
        _wait_until(lambda: observer.status().counters.watchdog_trips == trips + 1, "no watchdog trip")
        z_hold = _z_at_rest(observer, "after the watchdog tripped")
        time.sleep(0.8)
        assert abs(_z(observer) - z_hold) < 0.002, "the arm kept moving after the watchdog tripped"
    assert z_hold - z0 < 0.04  # ~2 cm in the 1 s before the trip; the whole chunk is 8 cm
