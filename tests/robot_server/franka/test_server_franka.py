"""`pde robot-server --backend franka` as a subprocess against franky-sim: the whole real path
(RobotClient -> server -> safety -> FrankaRobot -> franky -> libfranka -> FCI protocol)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import numpy as np
import pytest

from pde_contract.client import RobotClient, RobotServerError
from pde_contract.messages import ActionChunk, ActionSpace, ErrorCode
from robot_server.robots.franka.fci_sim import FciSim
from tests.helpers import free_port, pde_command, subprocess_env

RATE_HZ = 10.0


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
        cmd_port, obs_port = free_port(), free_port()
        env = subprocess_env(
            PDE_ROBOT_FCI_HOST=sim.host,
            PDE_ROBOT_CAMERAS="[]",
            PDE_FRANKA_REALTIME="ignore",  # franky-sim only: no PREEMPT_RT kernel here
            PDE_FRANKA_HOME_DYNAMICS_FACTOR="0.6",
        )
        proc = subprocess.Popen(
            [
                *pde_command("robot-server", "--backend", "franka"),
                "--cmd-port",
                str(cmd_port),
                "--obs-port",
                str(obs_port),
                "--heartbeat-timeout-s",
                "0.3",
                "--control-rate-hz",
                str(RATE_HZ),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        client = RobotClient(f"tcp://127.0.0.1:{cmd_port}", name="test", timeout_s=2.0)
        try:
            deadline = time.monotonic() + 60.0
            while True:
                assert proc.poll() is None, (
                    f"robot-server exited: {proc.stdout.read() if proc.stdout else ''}"
                )
                try:
                    info = client.connect()
                    break
                except RobotServerError:
                    assert time.monotonic() < deadline, "robot-server did not answer within 60 s"
                    time.sleep(0.2)
            assert info.backend == "franka"
            client.reset(timeout_s=60.0)
            yield client
        finally:
            client.close()
            proc.terminate()
            try:
                proc.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _z(client: RobotClient) -> float:
    state = client.status().state
    assert state is not None
    return float(state.ee_position_m[2])


def test_chunk_moves_the_arm_and_estop_latches(server: RobotClient) -> None:
    client = server
    client.release_estop()
    client.start_heartbeat(period_s=0.05)
    try:
        z0 = _z(client)
        client.submit_chunk(_chunk(1, rows=10, dz_m=0.004))  # 4 cm up over 1 s
        time.sleep(1.6)
        z1 = _z(client)
        assert z1 - z0 > 0.03, (z0, z1)
        client.submit_chunk(_chunk(2, rows=30, dz_m=-0.003))  # 9 cm down over 3 s
        time.sleep(0.5)
        client.estop("test")
        time.sleep(0.5)
        z_stop = _z(client)
        time.sleep(0.8)
        assert abs(_z(client) - z_stop) < 0.002, "the arm kept moving after the e-stop"
        assert z1 - z_stop < 0.03, "the rest of the chunk ran"
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
    trips = client.status().counters.watchdog_trips
    z0 = _z(client)
    client.submit_chunk(_chunk(10, rows=40, dz_m=0.002))  # 8 cm over 4 s, no heartbeat
    time.sleep(1.2)
    status = client.status()
    assert status.counters.watchdog_trips == trips + 1
    z_hold = _z(client)
    time.sleep(0.8)
    assert abs(_z(client) - z_hold) < 0.002, "the arm kept moving after the watchdog tripped"
    assert z_hold - z0 < 0.03
