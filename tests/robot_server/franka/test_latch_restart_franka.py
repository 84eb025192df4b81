"""Latches across a crash of `pde robot-server --backend franka` (franky-sim; the server a real
subprocess, killed with SIGKILL): an acknowledged e-stop is still latched after the restart and the
next chunk is refused; a reflex latched while the hand grasps leaves the fingers where they were
after the restart (no start-up homing while a fault is latched: homing waits for the first Reset)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from pde_contract.client import RobotClient, RobotServerError
from pde_contract.messages import ActionChunk, ActionSpace, ErrorCode, RobotFault
from robot_server.robots.base import RobotTarget
from robot_server.robots.franka import FrankaRobot
from robot_server.robots.franka.fci_sim import FciSim
from tests.robot_server.franka.conftest import sim_config
from tests.robot_server.franka.server_proc import RATE_HZ, start_franka_server

GRASP_WIDTH_M = 0.04
# The hand reports its width to 0.1 mm on franky-sim; homing (close, then open to 0.078 m) or any
# move would change it by centimetres.
FINGER_TOLERANCE_M = 0.002


@pytest.fixture(scope="module")
def fci() -> Iterator[FciSim]:
    with FciSim(realtime=True) as sim:
        yield sim


def _chunk(seq: int) -> ActionChunk:
    a = np.zeros((5, 7))
    a[:, 2] = 0.002
    a[:, 6] = 0.08
    return ActionChunk(
        seq=seq, episode_id="latch", action_space=ActionSpace.EE_DELTA, actions=a, control_rate_hz=RATE_HZ
    )


def _wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _ticks(client: RobotClient, n: int) -> None:
    """Let ``n`` control ticks pass (franky-sim may run slower than real time here)."""
    start = client.status().tick
    _wait_until(lambda: client.status().tick >= start + n, f"{n} control ticks did not pass")


@contextlib.contextmanager
def _finger_range(sim: FciSim) -> Iterator[list[float]]:
    """[min, max] of the simulated hand's width, sampled every 5 ms while the block runs: homing
    opens the fingers fully and then returns them, so the width at the end alone would not tell."""
    seen = [sim.hand_width_m, sim.hand_width_m]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.005):
            w = sim.hand_width_m
            seen[0], seen[1] = min(seen[0], w), max(seen[1], w)

    thread = threading.Thread(target=sample, name="finger-sampler")
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join()


def _refused(client: RobotClient, seq: int, code: ErrorCode) -> str:
    with pytest.raises(RobotServerError) as info:
        client.submit_chunk(_chunk(seq))
    assert info.value.code is code, info.value
    return str(info.value)


def test_an_estop_survives_a_kill_and_the_next_chunk_is_refused(fci: FciSim, tmp_path: Path) -> None:
    env = {"PDE_DATA_DIR": str(tmp_path)}
    first = start_franka_server(fci.host, **env)
    try:
        first.client.estop("operator pressed e-stop on the page")  # acknowledged: on disk now
        assert first.client.status().estopped
    finally:
        first.stop(kill=True)  # kill -9: no clean shutdown writes anything
    second = start_franka_server(fci.host, **env)
    try:
        status = second.client.status()
        assert status.estopped, second.output()
        assert "operator pressed e-stop on the page" in status.estop_reason
        assert "before the robot server restarted" in status.estop_reason
        _ticks(second.client, 5)
        assert "release_estop" in _refused(second.client, 1, ErrorCode.ESTOPPED)
        with pytest.raises(RobotServerError) as info:
            second.client.reset(timeout_s=30.0)
        assert info.value.code is ErrorCode.ESTOPPED
        second.client.release_estop()  # the explicit release
        assert not (tmp_path / "robot_estop.json").exists()
        assert second.client.submit_chunk(_chunk(2)).steps == 5
    finally:
        second.stop()


def test_a_reflex_while_grasping_leaves_the_fingers_where_they_are_after_a_restart(
    fci: FciSim, tmp_path: Path
) -> None:
    import franky

    fault_file = tmp_path / "robot_fault.json"
    # The server before the crash: the hand grasps, then the arm hits something (franky-sim has no
    # reflexes: the backend gets the exception franky raises for one).
    before = FrankaRobot(sim_config(fci.host, fault_state_file=fault_file, gripper_homing=False))
    before.connect()
    try:
        state = before.read_state()
        before.command(RobotTarget(GRASP_WIDTH_M, state.ee_position_m, state.ee_quat_xyzw), 0.1)
        gripper = before._gripper
        assert gripper is not None
        _wait_until(lambda: gripper.commands_executed >= 1 and gripper.wait_idle(0.0), "no grasp")
        grasped_m = before.read_state().gripper_width_m
        assert abs(grasped_m - GRASP_WIDTH_M) < FINGER_TOLERANCE_M
        before._recover_from_reflex(
            franky.ControlException(
                'libfranka: Move command aborted: motion aborted by reflex! ["cartesian_reflex"]'
            )
        )
        assert fault_file.exists()
    finally:
        before.disconnect()
    # The restart, with gripper homing on (the default; it used to run at start, opening the
    # fingers fully and closing them again: franky-sim's homing returns to the width it found).
    server = None
    try:
        with _finger_range(fci) as fingers_m:
            server = start_franka_server(fci.host, PDE_FRANKA_FAULT_STATE_FILE=str(fault_file))
            status = server.client.status()
            assert status.fault is RobotFault.REFLEX
            assert "before the robot server restarted" in status.fault_detail
            _ticks(server.client, 10)
        assert fingers_m[1] - fingers_m[0] < FINGER_TOLERANCE_M, (
            f"the fingers moved between {fingers_m[0]:.4f} and {fingers_m[1]:.4f} m (grasped at "
            f"{grasped_m:.4f} m) while a reflex was latched"
        )
        status = server.client.status()
        assert status.state is not None
        assert abs(status.state.gripper_width_m - grasped_m) < FINGER_TOLERANCE_M
        assert "reflex" in _refused(server.client, 1, ErrorCode.BACKEND_ERROR)
        with pytest.raises(RobotServerError) as info:
            server.client.gripper(0.08)
        assert info.value.code is ErrorCode.BACKEND_ERROR
        # The operator's Reset acknowledges the fault: the hand is homed now and opens.
        server.client.reset(timeout_s=180.0)
        _wait_until(
            lambda: server.client.status().state.gripper_width_m > 0.075,  # type: ignore[union-attr]
            "the hand did not open after the reset",
        )
        assert server.client.status().fault is RobotFault.NONE and not fault_file.exists()
    finally:
        if server is not None:
            server.stop(kill=True)
