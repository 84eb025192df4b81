"""FR3 facts the configuration must get right, against franky-sim: the real-time check that also
knows mainline PREEMPT_RT kernels, set_load from the configuration, gripper homing at the first
reset (never at start), a
latched fault that survives a restart until the operator's reset, and errors found at connect that
latch instead of being cleared silently."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pde_contract.messages import RobotFault
from robot_server.robots.base import RobotError, RobotNotConnectedError, RobotTarget
from robot_server.robots.franka import FrankaRobot
from robot_server.robots.franka.fci_sim import FciSim
from robot_server.robots.franka.realtime import KernelRealtime, kernel_realtime
from tests.robot_server.franka.conftest import sim_config

DEBIAN_13_RT_UNAME = "#1 SMP PREEMPT_RT Debian 6.12.38-1 (2025-07-16)"


# --- the real-time check ---------------------------------------------------------------------------


def test_kernel_realtime_asks_sys_then_uname_then_proc_config(tmp_path: Path) -> None:
    sys_rt, config = tmp_path / "realtime", tmp_path / "config.gz"
    sys_rt.write_text("1\n")
    assert kernel_realtime(sys_rt, "#1 SMP PREEMPT_DYNAMIC", config) == KernelRealtime(
        True, f"{sys_rt} = 1", libfranka_sees_it=True
    )
    missing = tmp_path / "no-such-file"
    # Mainline 6.12+ PREEMPT_RT (Debian 13): no /sys/kernel/realtime, libfranka cannot see it.
    k = kernel_realtime(missing, DEBIAN_13_RT_UNAME, config)
    assert k.realtime and not k.libfranka_sees_it and "PREEMPT_RT" in k.evidence
    with gzip.open(config, "wt") as f:
        f.write("CONFIG_PREEMPTION=y\nCONFIG_PREEMPT_RT=y\n")
    k = kernel_realtime(missing, "#1 SMP", config)
    assert k.realtime and not k.libfranka_sees_it and "CONFIG_PREEMPT_RT=y" in k.evidence
    with gzip.open(config, "wt") as f:
        f.write("CONFIG_PREEMPT_DYNAMIC=y\n# CONFIG_PREEMPT_RT is not set\n")
    k = kernel_realtime(missing, "#1 SMP PREEMPT_DYNAMIC", config)
    assert not k.realtime and "no CONFIG_PREEMPT_RT=y" in k.evidence


def _kernel(realtime: bool, libfranka_sees_it: bool = False) -> KernelRealtime:
    """A stand-in for the probe: this machine's kernel is whatever it is."""
    return KernelRealtime(realtime, "stand-in kernel", libfranka_sees_it)


def test_a_mainline_rt_kernel_passes_and_a_stock_kernel_is_refused(fci_sim: FciSim) -> None:
    config = sim_config(fci_sim.host, realtime="enforce", gripper=False)
    # Enforce handed to libfranka here would raise RealtimeException (no /sys/kernel/realtime on
    # this machine): connecting shows the backend ran the check itself and told libfranka to skip it.
    robot = FrankaRobot(config, kernel_probe=lambda: _kernel(True))
    robot.connect()
    try:
        assert robot.is_connected
    finally:
        robot.disconnect()
    with pytest.raises(
        RobotNotConnectedError, match=r"without a real-time kernel.*stand-in kernel.*realtime = "
    ):
        FrankaRobot(config, kernel_probe=lambda: _kernel(False)).connect()


# --- set_load and gripper homing ---------------------------------------------------------------------


def test_the_configured_load_reaches_the_controller_and_the_hand_is_homed(fci_sim: FciSim) -> None:
    inertia_kg_m2 = (0.001, 0.0, 0.0, 0.0, 0.001, 0.0, 0.0, 0.0, 0.0005)
    robot = FrankaRobot(
        sim_config(
            fci_sim.host,
            load_mass_kg=0.35,
            load_center_of_mass_m=(0.0, 0.01, 0.03),
            load_inertia_kg_m2=inertia_kg_m2,
        )
    )
    robot.connect()
    try:
        mass_kg, com_m, inertia = _load_reported(robot)
        assert mass_kg == pytest.approx(0.35, abs=1e-6)
        np.testing.assert_allclose(com_m, [0.0, 0.01, 0.03], atol=1e-6)
        np.testing.assert_allclose(inertia, inertia_kg_m2, atol=1e-6)
        # gripper_homing (on by default) homes the hand at the first reset, never at the start
        assert robot._gripper is not None and not robot._gripper.homed
        robot.home()
        assert robot._gripper.homed
        assert robot.read_state().gripper_width_m > 0.075  # homing ends open, as the reset does
    finally:
        robot.disconnect()
    # No load configured: 0 kg is sent, clearing the one the controller kept from before.
    robot = FrankaRobot(sim_config(fci_sim.host, gripper_homing=False))
    robot.connect()
    try:
        assert _load_reported(robot)[0] == 0.0
        robot.home()
        assert robot._gripper is not None and not robot._gripper.homed
    finally:
        robot.disconnect()


def _load_reported(robot: FrankaRobot) -> tuple[float, np.ndarray, np.ndarray]:
    """The load libfranka's state reports back from the controller. Holds no reference to the
    franky Robot afterwards (a live reference keeps its FCI connection open after disconnect)."""
    arm = robot.franky_robot
    assert arm is not None
    state = arm.state
    return float(state.m_load), np.ravel(state.F_x_Cload).copy(), np.ravel(state.I_load).copy()


# --- a latched fault across a restart -------------------------------------------------------------------


def _reflex(robot: FrankaRobot) -> None:
    import franky

    robot._recover_from_reflex(
        franky.ControlException(
            'libfranka: Move command aborted: motion aborted by reflex! ["cartesian_reflex"]'
        )
    )


def _hold_target(robot: FrankaRobot) -> RobotTarget:
    state = robot.read_state()
    return RobotTarget(0.08, ee_position_m=state.ee_position_m, ee_quat_xyzw=state.ee_quat_xyzw)


def test_a_latched_reflex_survives_a_restart_until_the_operator_resets(
    fci_sim: FciSim, tmp_path: Path
) -> None:
    config = sim_config(fci_sim.host, gripper=False, fault_state_file=tmp_path / "data" / "robot_fault.json")
    before = FrankaRobot(config)
    before.connect()
    try:
        _reflex(before)
        assert before.fault() is not None and config.fault_state_file is not None
        assert config.fault_state_file.exists()
    finally:
        before.disconnect()
    # The server restarts: a new backend on the same state file.
    after = FrankaRobot(config)
    report = after.fault()
    assert report is not None and report.kind is RobotFault.REFLEX and report.latched
    assert "cartesian_reflex" in report.detail and "before the robot server restarted" in report.detail
    after.connect()
    try:
        with pytest.raises(RobotError, match="cartesian_reflex"):
            after.command(_hold_target(after), 0.1)
        after.home()  # the operator's reset acknowledges it
        assert after.fault() is None and not config.fault_state_file.exists()
        after.command(_hold_target(after), 0.1)
    finally:
        after.disconnect()
    assert FrankaRobot(config).fault() is None


def test_an_unreadable_fault_file_latches_rather_than_clearing(tmp_path: Path) -> None:
    path = tmp_path / "robot_fault.json"
    path.write_text("{not json")
    report = FrankaRobot(sim_config("127.0.0.1", fault_state_file=path)).fault()
    assert report is not None and report.latched and "cannot be read" in report.detail


def test_the_fault_file_defaults_to_the_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PDE_DATA_DIR", str(tmp_path))
    assert sim_config("127.0.0.1").fault_state_file == tmp_path / "robot_fault.json"
    monkeypatch.delenv("PDE_DATA_DIR")
    assert sim_config("127.0.0.1").fault_state_file is None


class _ErrorsAtConnect:
    """The franky Robot, except that it reports errors until they are recovered (a robot that was
    left in a reflex, which franky-sim never is)."""

    def __init__(self, robot: Any) -> None:
        self._robot = robot
        self.has_errors = True
        self.recoveries = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._robot, name)

    def recover_from_errors(self) -> bool:
        self.recoveries += 1
        self.has_errors = False
        return True


class _FrankaLeftInAReflex(FrankaRobot):
    def _build(self, recover_errors: bool = True) -> Any:
        arm = _ErrorsAtConnect(super()._build(recover_errors))
        if recover_errors and arm.has_errors:
            arm.recover_from_errors()
        return arm


def test_errors_found_at_connect_latch_instead_of_clearing_silently(fci_sim: FciSim, tmp_path: Path) -> None:
    config = sim_config(fci_sim.host, gripper=False, fault_state_file=tmp_path / "robot_fault.json")
    robot = _FrankaLeftInAReflex(config)
    robot.connect()
    try:
        arm = robot.franky_robot
        assert isinstance(arm, _ErrorsAtConnect) and arm.recoveries == 0
        report = robot.fault()
        assert (
            report is not None
            and report.kind is RobotFault.REFLEX
            and "when the robot server connected" in report.detail
        )
        assert config.fault_state_file is not None and config.fault_state_file.exists()
        robot.home()
        assert arm.recoveries == 1 and robot.fault() is None
    finally:
        robot.disconnect()
