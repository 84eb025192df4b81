"""The FR3 through franky-control (libfranka). Runs unchanged against franky-sim.

Threads: the server's control loop calls ``command()``, which only records the newest target; a
motion worker hands it to franky (``move`` can block for as long as the controller does not
answer). The gripper has its own worker (gripper.py). After a network failure the franky
``Robot`` object is unusable and a background thread builds a new one.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from pde_contract.messages import RobotFault, RobotState
from robot_server.latch_file import LatchFileError
from robot_server.robots.base import FaultReport, Robot, RobotError, RobotNotConnectedError, RobotTarget
from robot_server.robots.franka import config as fr3
from robot_server.robots.franka.config import FrankaConfig
from robot_server.robots.franka.deadline import DeadlineExceeded, PendingCall, call_with_deadline
from robot_server.robots.franka.fault_state import LatchedFaultFile
from robot_server.robots.franka.gripper import HOMING_TIMEOUT_S, GripperWorker
from robot_server.robots.franka.home import HomePlan, plan_home
from robot_server.robots.franka.realtime import KernelRealtime, kernel_realtime
from robot_server.robots.franka.streaming import (
    FEEDFORWARD_SHARE,
    CartesianStreamer,
    make_streamer,
    stopping_speed,
    through_velocity,
)

if TYPE_CHECKING:  # franky is imported where an FR3 is driven: the sim-only server runs without it
    import franky

logger = logging.getLogger(__name__)

# A fault the backend recovered from by itself stays in Status this long (latched ones until home).
_TRANSIENT_FAULT_REPORT_S = 10.0
# A Reflex robot mode that outlasts this (no automatic recovery took it away) latches as a reflex.
_REFLEX_CONFIRM_S = 0.5

_REALTIME_WARNING = """
*****************************************************************************************
*  PDE_FRANKA_REALTIME=ignore: libfranka's real-time check is OFF.                      *
*  Use this only against franky-sim or for a dry run. On the real FR3 without a          *
*  PREEMPT_RT kernel expect communication_constraints_violation reflexes and jerky       *
*  motion. See docs/lab-setup.md.                                                        *
*****************************************************************************************"""


def _capped(values: Any, maximum: Any) -> Any:
    return np.minimum(np.asarray(values, float), np.asarray(maximum, float))


def apply_fr3_dynamics_limits(robot: franky.Robot) -> None:
    """Set the FR3's own limits (franky starts with the Panda's), never above what franky allows."""
    robot.joint_velocity_limit.set(_capped(fr3.FR3_JOINT_VELOCITY_RAD_S, robot.joint_velocity_limit.max))
    robot.joint_acceleration_limit.set(
        _capped(fr3.FR3_JOINT_ACCELERATION_RAD_S2, robot.joint_acceleration_limit.max)
    )
    robot.joint_jerk_limit.set(_capped(fr3.FR3_JOINT_JERK_RAD_S3, robot.joint_jerk_limit.max))
    for limit, value in (
        (robot.translation_velocity_limit, fr3.FR3_TRANSLATION_VELOCITY_M_S),
        (robot.translation_acceleration_limit, fr3.FR3_TRANSLATION_ACCELERATION_M_S2),
        (robot.translation_jerk_limit, fr3.FR3_TRANSLATION_JERK_M_S3),
        (robot.rotation_velocity_limit, fr3.FR3_ROTATION_VELOCITY_RAD_S),
        (robot.rotation_acceleration_limit, fr3.FR3_ROTATION_ACCELERATION_RAD_S2),
        (robot.rotation_jerk_limit, fr3.FR3_ROTATION_JERK_RAD_S3),
        (robot.elbow_velocity_limit, fr3.FR3_ELBOW_VELOCITY_RAD_S),
        (robot.elbow_acceleration_limit, fr3.FR3_ELBOW_ACCELERATION_RAD_S2),
        (robot.elbow_jerk_limit, fr3.FR3_ELBOW_JERK_RAD_S3),
    ):
        limit.set(min(value, float(limit.max)))


def explain_connect_error(e: BaseException, host: str, timeout_s: float) -> str:
    """What went wrong while connecting, and what to do about it."""
    kind = type(e).__name__
    text = str(e)
    if isinstance(e, DeadlineExceeded):
        return (
            f"The FR3 at {host} accepted the connection but did not answer the FCI handshake within "
            f"{timeout_s:.1f} s. Something at that address listens on TCP 1337 but does not speak FCI, "
            "or the controller hangs (a frozen franky-sim looks the same). Check PDE_FRANKA_HOST, "
            "restart the controller (or the simulator) and try again."
        )
    if kind == "RealtimeException":
        return (
            f"libfranka refused to run without a real-time kernel ({text}). Boot the PREEMPT_RT kernel "
            "and grant rtprio/memlock (docs/lab-setup.md). Against franky-sim only, set "
            "PDE_FRANKA_REALTIME=ignore."
        )
    if kind == "IncompatibleVersionException":
        return (
            f"The FR3 at {host} runs a system version that libfranka 0.21 (franky-control 2.0.0) does "
            f"not support ({text}). Match the robot's system version and libfranka (Franka's "
            "compatibility table) before connecting."
        )
    if "refused" in text.lower():
        return (
            f"The FR3 at {host} refused the FCI connection ({text}). Unlock the brakes and enable FCI "
            "in Desk (or set [franka] desk_user and desk_password_file to do it on connect), make sure "
            "no other program holds the FCI connection, and check the FCI address ([franka] host)."
        )
    if kind == "NetworkException":
        return (
            f"No FCI connection to {host} ({text}). Check the cable to the robot's control box (not "
            "the arm base), the dedicated NIC's address on the robot's subnet, and PDE_FRANKA_HOST "
            "(docs/lab-setup.md)."
        )
    return f"Connecting to the FR3 at {host} failed: {kind}: {text}"


class HomeRefused(RobotError):
    """A home move refused before it started, or stopped at its deadline (the message has the
    numbers)."""


def franky_network_error(text: str) -> Exception:
    import franky

    return franky.NetworkException(text)


class FrankaRobot(Robot):
    """An FR3 with a Franka Hand, through franky-control."""

    name = "franka"

    def __init__(
        self, config: FrankaConfig, kernel_probe: Callable[[], KernelRealtime] = kernel_realtime
    ) -> None:
        """``config``: built by robot_server/backends.py (franka_config: the file's [franka] section,
        PDE_FRANKA_*, the server's fci_host); the robot reads no settings itself.
        ``kernel_probe``: whether the kernel is real-time (tests stand in for other kernels)."""
        self.config = config
        self._robot: franky.Robot | None = None
        self._streamer: CartesianStreamer | None = None
        self._gripper: GripperWorker | None = None
        # Serialises every franky motion call between the motion worker, home() and disconnect().
        self._franky_lock = threading.RLock()
        self._cond = threading.Condition()
        self._pending: tuple[str, Any] | None = None
        self._busy_since: float | None = None
        self._worker: threading.Thread | None = None
        self._closing = False
        self._lost_reason = ""
        self._failed_reason = ""  # a latched fault: refuse motion until home()
        self._fault: FaultReport | None = None  # what Status reports (fault())
        self._guiding = False  # set_guiding(True): no targets go to the arm
        self._reflex_seen_s: float | None = None  # when the robot mode was first seen as Reflex
        self._reconnect_thread: threading.Thread | None = None
        self._mode: str | None = None  # "cartesian" / "joint": franky cannot switch while moving
        # (robot time in ms, monotonic time it was first seen) while motion is commanded: the
        # robot clock stops when the controller hangs, and franky does not always notice.
        self._watch: tuple[int, float] | None = None
        self._last_joint_target: np.ndarray | None = None
        self._joint_at_rest = False  # the last joint motion ends at rest at _last_joint_target
        self._recovery_times: collections.deque[float] = collections.deque()
        self.last_home: HomePlan | None = None  # the last home move's plan, and the robot time it took
        self.last_home_s: float | None = None
        self.reflex_recoveries = 0
        self.reflexes = 0  # latched: operator action needed
        self.user_stops = 0
        self.reconnects = 0
        self.network_errors = 0
        self.last_error = ""
        self._kernel_probe = kernel_probe
        self._franky_dynamics_factor = config.relative_dynamics_factor
        self._libfranka_enforces_realtime = True  # decided at connect (_check_realtime)
        self._fault_file = LatchedFaultFile(config.fault_state_file)
        restored = self._fault_file.load()
        if restored is not None:  # latched before a restart: still refuse motion until home()
            self._fault = restored
            self._failed_reason = self.last_error = f"{restored.detail} {restored.action}"
            logger.error("%s", self.last_error)

    @property
    def relative_dynamics_factor(self) -> float:
        """What franky held for the arm when it connected (the configured value before that). Read
        once there, not here: Status is asked from the command thread, away from franky's calls."""
        return self._franky_dynamics_factor

    # --- connection -----------------------------------------------------------------------------

    def _build(self, recover_errors: bool = True) -> franky.Robot:
        """Construct and configure a franky Robot. Runs in a deadline thread. ``recover_errors``:
        clear errors the robot reports (a reconnection after a network loss); at the first
        connect they latch instead (connect())."""
        import franky

        realtime = (
            franky.RealtimeConfig.Enforce
            if self._libfranka_enforces_realtime
            else franky.RealtimeConfig.Ignore
        )
        robot = franky.Robot(
            self.config.host,
            relative_dynamics_factor=self.config.relative_dynamics_factor,
            realtime_config=realtime,
        )
        apply_fr3_dynamics_limits(robot)
        robot.set_collision_behavior(
            list(self.config.torque_thresholds_nm), list(self.config.force_thresholds_n)
        )
        # Always, 0 kg too: the controller keeps the last load it was given across connections.
        robot.set_load(
            self.config.load_mass_kg,
            list(self.config.load_center_of_mass_m),
            list(self.config.load_inertia_kg_m2),
        )
        if recover_errors and robot.has_errors:
            robot.recover_from_errors()
        return robot

    def _check_realtime(self) -> bool:
        """Whether libfranka should run its own real-time check (Enforce). Raises on a kernel
        that is not real-time, unless the configuration says to ignore that."""
        if self.config.realtime == "ignore":
            logger.warning("%s", _REALTIME_WARNING)
            return False
        kernel = self._kernel_probe()
        if not kernel.realtime:
            self.last_error = (
                "The FR3 backend refuses to run without a real-time kernel, and this one is not "
                f"({kernel.evidence}). Boot the PREEMPT_RT kernel and grant rtprio/memlock "
                "(docs/lab-setup.md). Against franky-sim only, set PDE_FRANKA_REALTIME=ignore "
                '([franka] realtime = "ignore").'
            )
            raise RobotNotConnectedError(self.last_error)
        if not kernel.libfranka_sees_it:
            # libfranka 0.21 reads only /sys/kernel/realtime, which mainline PREEMPT_RT kernels
            # (6.12+) lack: its check would refuse this real-time kernel, so ours stands for it.
            logger.info(
                "real-time kernel (%s) without /sys/kernel/realtime: libfranka's own check is skipped",
                kernel.evidence,
            )
            return False
        return True

    def _build_gripper(self) -> franky.Gripper:
        import franky

        return franky.Gripper(self.config.host)

    def connect(self) -> None:
        if self.is_connected:
            return
        self._closing = False
        self._libfranka_enforces_realtime = self._check_realtime()
        if self._fault_file.path is None:
            logger.warning(
                "no fault_state_file (nor PDE_DATA_DIR): a latched reflex or user stop will not survive a "
                "restart of the robot server"
            )
        if self.config.desk_enabled:
            from robot_server.desk import DeskHelper

            DeskHelper(
                self.config.host, self.config.desk_user, self.config.desk_password.get_secret_value()
            ).prepare()
        try:
            robot = call_with_deadline(
                functools.partial(self._build, recover_errors=False),
                self.config.connect_timeout_s,
                "franka-connect",
            )
        except Exception as e:
            self.last_error = explain_connect_error(e, self.config.host, self.config.connect_timeout_s)
            raise RobotNotConnectedError(self.last_error) from e
        self._install(robot)
        if robot.has_errors and not self._failed_reason:
            self._latch(
                RobotFault.REFLEX,
                f"the FR3 reported errors when the robot server connected ({_current_errors(robot)}); they "
                "were not cleared automatically.",
                "Check the arm and the workspace, then reset (home) to acknowledge: the reset clears them.",
            )
        if self.config.gripper and self._gripper is None:
            gripper = GripperWorker(
                self._build_gripper,
                self.config.connect_timeout_s,
                self.config.gripper_speed_m_s,
                self.config.gripper_force_n,
                self.config.gripper_deadband_m,
                fr3.FR3_GRIPPER_MAX_WIDTH_M,
                self.config.gripper_epsilon_inner_m,
                self.config.gripper_epsilon_outer_m,
                self.config.gripper_empty_width_m,
                self.config.gripper_stop_on_hold,
            )
            try:
                gripper.start()  # homed at the first reset (home()), never here
            except Exception as e:
                self.last_error = (
                    "The arm connected but the Franka Hand did not: "
                    + explain_connect_error(e, self.config.host, self.config.connect_timeout_s)
                    + " If no hand is mounted, set PDE_FRANKA_GRIPPER=false."
                )
                self._drop_robot()
                raise RobotNotConnectedError(self.last_error) from e
            self._gripper = gripper
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._motion_loop, name="franka-motion", daemon=True)
            self._worker.start()
        logger.info("connected to the FR3 at %s (streaming: %s)", self.config.host, self.config.streaming)

    def _install(self, robot: franky.Robot) -> None:
        with self._franky_lock:
            self._franky_dynamics_factor = float(robot.relative_dynamics_factor.velocity)
            self._robot = robot
            self._streamer = make_streamer(self.config.streaming, robot)
            self._mode = None
            self._lost_reason = ""

    def _drop_robot(self) -> None:
        # Dropping the last reference closes libfranka's connection, so a new one is accepted. A
        # worker stuck inside franky may hold the lock: do not wait for it.
        locked = self._franky_lock.acquire(timeout=0.5)
        try:
            self._robot = None
            self._streamer = None
            self._watch = None
        finally:
            if locked:
                self._franky_lock.release()

    def disconnect(self) -> None:
        self._closing = True
        with self._cond:
            self._pending = None
            self._cond.notify_all()
        # Let the motion worker finish its current call first: franky calls from two threads at
        # once can deadlock, and a hung call would keep the FCI connection open.
        if self._worker is not None:
            self._worker.join(timeout=self.config.stall_timeout_s)
            self._worker = None
        robot = self._robot
        if robot is not None and not self._lost_reason:
            try:
                # A stop that cannot reach the robot must not hang shutdown.
                call_with_deadline(functools.partial(self._stop_and_wait, robot, 2.0), 3.0, "franka-stop")
            except Exception as e:
                logger.warning("stopping the arm on disconnect failed: %s: %s", type(e).__name__, e)
                try:  # a motion still running keeps libfranka's connection open: end it hard
                    call_with_deadline(robot.stop, 2.0, "franka-stop-hard")
                except Exception as e2:
                    logger.warning("robot.stop() on disconnect failed too: %s: %s", type(e2).__name__, e2)
        robot = None  # only self._robot may keep the connection open now
        if self._gripper is not None:
            self._gripper.stop()
            self._gripper = None
        self._drop_robot()

    @property
    def is_connected(self) -> bool:
        return self._robot is not None and not self._lost_reason and not self._stalled()

    def _stalled(self) -> bool:
        busy = self._busy_since
        return busy is not None and time.monotonic() - busy > self.config.stall_timeout_s

    def _lose(self, reason: str) -> None:
        """The franky Robot is unusable: drop it and rebuild in the background."""
        if self._closing:
            return
        self.network_errors += 1
        self._lost_reason = reason
        self.last_error = reason
        self._fault = FaultReport(RobotFault.CONNECTION_LOST, reason)
        logger.error("%s", reason)
        self._drop_robot()
        if self._reconnect_thread is None or not self._reconnect_thread.is_alive():
            self._reconnect_thread = threading.Thread(
                target=self._reconnect_loop, name="franka-reconnect", daemon=True
            )
            self._reconnect_thread.start()

    def _reconnect_loop(self) -> None:
        attempt = 0
        pending: PendingCall[Any] | None = None
        waited_s = 0.0
        while not self._closing:
            if pending is None:
                attempt += 1
                pending = PendingCall(self._build, "franka-reconnect-attempt")
                waited_s = 0.0
            try:
                robot = pending.wait(self.config.connect_timeout_s)
            except DeadlineExceeded as e:
                # A hung handshake often completes once the controller answers again; only give up
                # on it after a few deadlines (a new attempt would queue behind it anyway).
                waited_s += self.config.connect_timeout_s
                if waited_s >= 3 * self.config.connect_timeout_s:
                    pending.abandon()
                    pending = None
                self.last_error = (
                    f"{self._lost_reason} Reconnection attempt {attempt}: "
                    + explain_connect_error(e, self.config.host, self.config.connect_timeout_s)
                )
                continue
            except Exception as e:
                pending = None
                self.last_error = (
                    f"{self._lost_reason} Reconnection attempt {attempt}: "
                    + explain_connect_error(e, self.config.host, self.config.connect_timeout_s)
                )
                time.sleep(self.config.reconnect_interval_s)
                continue
            if self._closing:
                return
            self._install(robot)
            self.reconnects += 1
            logger.warning("reconnected to the FR3 at %s (attempt %d)", self.config.host, attempt)
            return

    def wait_connected(self, timeout_s: float) -> bool:
        """Wait for a background reconnection (tests, home())."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.is_connected:
                return True
            time.sleep(0.02)
        return self.is_connected

    def _require(self) -> franky.Robot:
        if self._lost_reason:
            raise RobotNotConnectedError(
                f"{self.last_error or self._lost_reason} Reconnecting in the background; the arm is not "
                "moving. Commands resume when the connection is back."
            )
        if self._robot is None:
            raise RobotNotConnectedError(
                f"Not connected to the FR3 at {self.config.host}: call connect() first."
            )
        if self._stalled():
            raise RobotNotConnectedError(
                f"The FR3 at {self.config.host} has not answered a motion command for more than "
                f"{self.config.stall_timeout_s:.1f} s (controller or network hung). Check the robot's "
                "lights and Desk; the backend reconnects when libfranka reports the timeout."
            )
        if self._failed_reason:
            raise RobotError(self._failed_reason)
        return self._robot

    def _robot_or_raise(self) -> franky.Robot:
        """The franky Robot; without one, what ``_require`` raises (lost or not connected)."""
        robot = self._robot
        if robot is None:
            self._require()  # raises: there is no robot
            raise RobotNotConnectedError(
                f"Not connected to the FR3 at {self.config.host}: call connect() first."
            )
        return robot

    # --- motion -------------------------------------------------------------------------------

    def _check_alive(self, robot: franky.Robot) -> None:
        try:
            robot_time_ms = int(robot.state.time.to_msec())
        except Exception as e:  # franky raises NetworkException once its control thread timed out
            self._lose(f"Lost the FCI connection to the FR3 at {self.config.host} ({e}); the arm stopped.")
            self._require()
            raise
        now = time.monotonic()
        if self._watch is None or self._watch[0] != robot_time_ms:
            self._watch = (robot_time_ms, now)
            return
        silent_s = now - self._watch[1]
        if silent_s > self.config.stall_timeout_s:
            self._lose(
                f"The FR3 at {self.config.host} sent no state for {silent_s:.1f} s while moving "
                "(controller hung or network down)."
            )
            self._require()

    def command(self, target: RobotTarget, period_s: float) -> None:
        self._check_alive(self._require())
        if target.joint_positions_rad is not None:
            nxt = target.next_target
            next_q = None if nxt is None or nxt.joint_positions_rad is None else nxt.joint_positions_rad
            item: tuple[str, Any] = (
                "joint",
                (
                    np.asarray(target.joint_positions_rad, float).copy(),
                    period_s,
                    None if next_q is None else np.asarray(next_q, float).copy(),
                ),
            )
        elif target.ee_position_m is not None and target.ee_quat_xyzw is not None:
            nxt = target.next_target
            next_pose = (
                None
                if nxt is None or nxt.ee_position_m is None or nxt.ee_quat_xyzw is None
                else (np.asarray(nxt.ee_position_m, float).copy(), np.asarray(nxt.ee_quat_xyzw, float).copy())
            )
            item = (
                "cartesian",
                (
                    np.asarray(target.ee_position_m, float).copy(),
                    np.asarray(target.ee_quat_xyzw, float).copy(),
                    period_s,
                    next_pose,
                ),
            )
        else:
            raise RobotError("RobotTarget needs either joint_positions_rad or ee_position_m + ee_quat_xyzw")
        with self._cond:
            self._pending = item  # the newest target wins
            self._cond.notify_all()
        if self._gripper is not None:
            self._gripper.request(target.gripper_width_m, held=target.gripper_hold)

    def hold(self) -> None:
        if self._robot is None or self._lost_reason:
            return  # nothing is moving: a lost connection already stopped the arm
        with self._cond:
            self._pending = ("hold", None)
            self._cond.notify_all()
        self._watch = None
        if self._gripper is not None:
            self._gripper.halt()  # the fingers stop too; a completed grasp keeps its force

    def set_guiding(self, enabled: bool) -> None:
        """Guiding: stop the motion, unlock every axis and the elbow for hand-guiding
        (``set_guiding_mode``), then send no targets until disabled; the operator guides the arm
        with the pilot's guiding button. franky cannot read whether the button is pressed."""
        if not enabled:
            self._guiding = False
            return
        robot = self._robot_or_raise()
        if self._lost_reason:
            self._require()  # raises: not connected
        # allowed after a latched fault too: guiding the arm free of what it hit, before Reset
        self._guiding = True
        with self._cond:
            self._pending = None
        with self._franky_lock:
            if not self._stop_and_wait(robot, self.config.stall_timeout_s):
                self._guiding = False
                raise RobotError(
                    f"the running motion did not stop within {self.config.stall_timeout_s:.1f} s, so "
                    "guiding was not enabled (the stop stays requested); try again"
                )
            if self._streamer is not None:
                self._streamer.reset()
            self._last_joint_target = None
            try:
                call_with_deadline(
                    functools.partial(robot.set_guiding_mode, [True] * 6, True), 2.0, "franka-guiding"
                )
            except Exception as e:  # the arm is stopped and stays uncommanded: guiding by Desk works
                self.last_error = (
                    f"set_guiding_mode failed ({type(e).__name__}: {e}); the arm is not commanded, so "
                    "hand-guiding works with the axes Desk allows"
                )
                logger.warning("%s", self.last_error)
        if self._gripper is not None:
            self._gripper.halt()

    def fault(self) -> FaultReport | None:
        report = self._fault
        if (
            report is None
            or report.latched
            or (report.kind is RobotFault.CONNECTION_LOST and self._lost_reason)
        ):
            return report
        return report if time.monotonic() - report.time_s < _TRANSIENT_FAULT_REPORT_S else None

    def _motion_loop(self) -> None:
        while not self._closing:
            with self._cond:
                while self._pending is None and not self._closing:
                    self._cond.wait(0.2)
                if self._closing:
                    return
                item, self._pending = self._pending, None
                self._busy_since = time.monotonic()
            assert item is not None
            try:
                with self._franky_lock:
                    robot, streamer = self._robot, self._streamer
                    if robot is None or streamer is None or self._failed_reason:
                        continue
                    if self._guiding and item[0] != "hold":
                        continue
                    self._execute(robot, streamer, item)
            except Exception as e:
                try:
                    self._on_motion_error(e)
                except Exception as e2:  # the thread must outlive any error handling too
                    self._latch(
                        RobotFault.RECOVERY_FAILED,
                        f"handling {type(e).__name__}: {e} failed with {type(e2).__name__}: {e2}.",
                        "Check the arm and Desk, then reset (home) to resume.",
                    )
            finally:
                self._busy_since = None

    def _execute(self, robot: franky.Robot, streamer: CartesianStreamer, item: tuple[str, Any]) -> None:
        import franky

        kind, payload = item
        if kind == "hold":
            if robot.is_in_control:
                if self._mode == "joint":
                    robot.move(franky.JointStopMotion(), asynchronous=True)
                else:
                    streamer.stop()
            streamer.reset()
            self._last_joint_target = None
            return
        if self._mode is not None and self._mode != kind and robot.is_in_control:
            # franky cannot change the control signal type of a running motion.
            if not self._stop_and_wait(robot, self.config.stall_timeout_s):
                self.last_error = (
                    f"the {self._mode} motion did not stop within {self.config.stall_timeout_s:.1f} s; "
                    f"the {kind} target was dropped (the next one tries again)"
                )
                logger.warning("%s", self.last_error)
                return
            streamer.reset()
            self._last_joint_target = None
        self._mode = kind
        if kind == "cartesian":
            position, quat, period_s, next_pose = payload
            streamer.send(position, quat, period_s, next_pose)
            return
        q, period_s, next_q = payload
        last_q = self._last_joint_target
        resend = self._joint_at_rest and last_q is not None and np.array_equal(q, last_q)
        if resend and robot.is_in_control:
            return  # already coming to rest here: a new motion would lose its braking (streaming.py)
        velocity = np.zeros(7)
        speed_factor = 1.0
        if self._last_joint_target is not None and next_q is not None and period_s > 0.0:
            # as the Cartesian stream does (streaming.py): at rest where the stream stops or turns,
            # and never faster than the arm can still stop from by the next target
            velocity = np.clip(through_velocity(q - self._last_joint_target, next_q - q, period_s), -1.0, 1.0)
            if np.any(velocity):
                factor = robot.relative_dynamics_factor
                cap = stopping_speed(next_q - q, robot.joint_acceleration_limit.get() * factor.acceleration)
                max_rad_s = np.asarray(robot.joint_velocity_limit.get(), float) * factor.velocity
                speed_factor = min(1.0, max(float(np.max(cap / max_rad_s)), 1e-3))
                # within what the motion may reach, or ruckig refuses the target
                bound = FEEDFORWARD_SHARE * np.minimum(cap, max_rad_s * speed_factor)
                velocity = np.clip(velocity, -bound, bound)
        waypoint = franky.JointWaypoint(
            franky.JointState(q, velocity),
            franky.ReferenceType.Absolute,
            minimum_time=franky.Duration(max(1, round(period_s * 1000.0))),
        )
        motion = franky.JointWaypointMotion(
            [waypoint],
            relative_dynamics_factor=franky.RelativeDynamicsFactor(speed_factor, 1.0, 1.0),
            return_when_finished=False,
        )
        robot.move(motion, asynchronous=True)
        self._last_joint_target = q
        self._joint_at_rest = not np.any(velocity)

    def _stop_and_wait(self, robot: franky.Robot, timeout_s: float) -> bool:
        """Stop the running motion and wait for it to end. False when it still runs after
        ``timeout_s``: then nothing of another motion type may be started (franky refuses to change
        the control type of a running motion, and the arm would keep the old one)."""
        import franky

        if robot.is_in_control:
            if self._mode == "joint":
                robot.move(franky.JointStopMotion(), asynchronous=True)
            elif self._streamer is not None:
                self._streamer.stop()  # a stop of the streamer's own control type (pose or torque)
            else:
                robot.stop()
        try:
            stopped = bool(robot.join_motion(timeout_s))
        except franky.ControlException as e:
            if "preempted" not in str(e):
                raise
            stopped = True
        if stopped:
            self._mode = None
        return stopped

    def _on_motion_error(self, e: Exception) -> None:
        import franky

        if isinstance(e, franky.NetworkException):
            self._lose(
                f"Lost the FCI connection to the FR3 at {self.config.host} ({e}); libfranka stopped the arm."
            )
            return
        if isinstance(e, franky.ControlException):
            self._recover_from_reflex(e)
            return
        if isinstance(e, franky.InvalidMotionTypeException):
            self.last_error = f"motion type changed while moving ({e}); stopping before the next target"
            logger.warning("%s", self.last_error)
            with self._franky_lock:
                if self._robot is not None:
                    self._stop_and_wait(self._robot, self.config.stall_timeout_s)
            return
        # e.g. RuntimeError('Motion planner failed ...') for a target the planner cannot reach.
        self.last_error = (
            f"franky rejected a target: {type(e).__name__}: {e}. The safety layer should not let such "
            "a target through; holding position."
        )
        logger.error("%s", self.last_error)
        self._fault = FaultReport(RobotFault.COMMAND_REJECTED, self.last_error)
        if self._streamer is not None:
            self._streamer.reset()

    def _latch(self, kind: RobotFault, detail: str, action: str) -> None:
        """Refuse motion until ``home()``: the next ``command()`` raises, so the executor drops the
        chunk and stops commanding where the arm stopped; Status reports ``kind`` and ``action``."""
        reason = f"{detail} {action}"
        self._fault = FaultReport(kind, detail, action)
        self._fault_file.save(self._fault)
        self._failed_reason = reason
        self.last_error = reason
        logger.error("%s", reason)
        if self._streamer is not None:
            self._streamer.reset()
        self._last_joint_target = None
        self._mode = None

    def _recover_from_reflex(self, e: Exception) -> None:
        """Fault model: a user stop and a reflex (collision, limits, discontinuities) stop the arm
        where it is and latch until an operator resets (home); only a communication constraints
        violation (a late packet, nothing hit) recovers by itself, within a budget."""
        text = str(e)
        if "preempted" in text:  # a newer motion replaced the running one: not a fault
            logger.debug("motion preempted: %s", text)
            return
        if "user stop" in text.lower():
            self.user_stops += 1
            self._latch(
                RobotFault.USER_STOP,
                f"FR3 user stop pressed ({text}): the arm is stopped.",
                "Release the stop, check the cell, then reset (home) to resume.",
            )
            return
        if "communication_constraints_violation" not in text:
            self.reflexes += 1
            self._latch(
                RobotFault.REFLEX,
                f"FR3 reflex: {text}. The arm stopped where it was and the chunk was dropped.",
                "Check the workspace (and the collision thresholds), then reset (home) to acknowledge "
                "and resume.",
            )
            return
        now = time.monotonic()
        while self._recovery_times and now - self._recovery_times[0] > self.config.recovery_window_s:
            self._recovery_times.popleft()
        reason = f"FR3 reflex/control error: {e}"
        if len(self._recovery_times) >= self.config.max_recoveries:
            self._latch(
                RobotFault.RECOVERY_FAILED,
                f"{reason}. That is more than {self.config.max_recoveries} automatic recoveries within "
                f"{self.config.recovery_window_s:.0f} s: motion is refused.",
                "Check the workspace for collisions and the collision thresholds, then reset (home) to "
                "resume.",
            )
            return
        self._recovery_times.append(now)
        with self._franky_lock:
            robot = self._robot
            if robot is None:
                return
            try:
                ok = bool(robot.recover_from_errors())
            except Exception as e2:  # CommandException, e.g. while a user stop is engaged
                self._latch(
                    RobotFault.RECOVERY_FAILED,
                    f"{reason}; automatic recovery was refused ({type(e2).__name__}: {e2}).",
                    "If the user stop is pressed, release it; clear errors in Desk, then reset (home) "
                    "to resume.",
                )
                return
            if self._streamer is not None:
                self._streamer.reset()
            self._last_joint_target = None
            self._mode = None
        self.reflex_recoveries += 1
        self.last_error = f"{reason} (automatic recovery {'succeeded' if ok else 'FAILED'})"
        logger.warning("%s", self.last_error)
        if ok:
            self._fault = FaultReport(RobotFault.COMMUNICATION, self.last_error)
        else:
            self._latch(
                RobotFault.RECOVERY_FAILED,
                f"{reason}; automatic recovery failed.",
                "Clear the error in Desk (or press the pilot's confirm button), then reset (home) to resume.",
            )

    def home(
        self, task: str = "", seed: int | None = None, joints_rad: Sequence[float] | None = None
    ) -> None:
        import franky

        # One home (the configuration's); a task's own reset pose comes with its Reset.
        goal = self.config.home_joints_rad if joints_rad is None else joints_rad

        if self._lost_reason and not self.wait_connected(self.config.connect_timeout_s):
            self._require()
        if self._robot is None:
            self.connect()
        with self._cond:
            self._pending = None
        if not self._franky_lock.acquire(timeout=self.config.stall_timeout_s):
            raise RobotNotConnectedError(
                f"The FR3 at {self.config.host} is not answering motion commands; cannot home."
            )
        try:
            robot = self._robot_or_raise()
            try:
                if not self._stop_and_wait(robot, self.config.stall_timeout_s):
                    raise RobotError(
                        f"The FR3's previous motion did not stop within {self.config.stall_timeout_s:.1f} s, "
                        "so homing was not started (the stop stays requested). Reset again; on a slow "
                        "simulator raise PDE_FRANKA_STALL_TIMEOUT_S."
                    )
                plan = plan_home(
                    np.asarray(robot.state.q, float),
                    goal,
                    float(robot.relative_dynamics_factor.velocity),
                    self.config.home_dynamics_factor,
                    robot.joint_velocity_limit.get(),
                    robot.joint_acceleration_limit.get(),
                    robot.joint_jerk_limit.get(),
                    self.config.home_timeout_s,
                )
                if not plan.fits:  # before anything changes: the latch stays, nothing moves
                    raise HomeRefused(plan.refusal())
                if robot.has_errors and not robot.recover_from_errors():
                    raise RobotError(
                        "The FR3 reports an error that automatic recovery cannot clear. Clear it in Desk, "
                        "then reset again."
                    )
                try:
                    self._fault_file.clear()  # the operator's reset acknowledged it
                except LatchFileError as e:
                    raise RobotError(f"The reset was not started: {e}.") from e
                self._failed_reason = ""
                self._fault = None
                self._guiding = False
                self._recovery_times.clear()
                if self._streamer is not None:
                    self._streamer.reset()
                self._last_joint_target = None
                motion = franky.JointMotion(
                    [float(q) for q in goal],
                    relative_dynamics_factor=self.config.home_dynamics_factor,
                )
                self._mode = "joint"
                self.last_home = plan
                self.last_home_s = None
                robot.move(motion, asynchronous=True)
                self.last_home_s = self._join_home(robot, plan)
                self._mode = None
                self._watch = None
            except HomeRefused:
                raise
            except (franky.NetworkException, RuntimeError) as e:
                if isinstance(e, RuntimeError) and "Net" not in str(e):
                    raise RobotError(f"Home move failed: {e}.") from e
                self._lose(f"Lost the FCI connection to the FR3 at {self.config.host} during home ({e}).")
                raise RobotNotConnectedError(self.last_error) from e
            except franky.ControlException as e:
                raise RobotError(
                    f"Home move failed: {e}. Check the arm and the workspace, clear the error (Desk) and "
                    "reset again."
                ) from e
            except franky.CommandException as e:  # e.g. recovery while the user stop is engaged
                raise RobotError(
                    f"The FR3 refused the recovery or the home move ({e}). If the user stop is pressed, "
                    "release it; clear errors in Desk, then reset again."
                ) from e
        finally:
            self._franky_lock.release()
        if self._gripper is not None:
            # The first reset homes the hand, never the start: a server restarted mid-grasp (or
            # with a fault latched) must not open the fingers before anyone has looked.
            homing = self.config.gripper_homing and not self._gripper.homed
            if homing and not self._gripper.home(HOMING_TIMEOUT_S):
                raise RobotError(f"The arm is home, but {self._gripper.last_error}")
            self._gripper.request(self._gripper.max_width_m)
            if not self._gripper.wait_idle(5.0):
                logger.warning("the gripper did not open within 5 s after home")

    def _join_home(self, robot: franky.Robot, plan: HomePlan) -> float:
        """Wait for the home move, on the robot's clock (a simulator slower than real time gets
        the same deadline in its own time); the robot time it took."""
        start_ms = last_ms = int(robot.state.time.to_msec())
        last_change_s = time.monotonic()
        while not robot.join_motion(0.1):
            now_ms = int(robot.state.time.to_msec())
            if now_ms != last_ms:
                last_ms, last_change_s = now_ms, time.monotonic()
            elif time.monotonic() - last_change_s > self.config.stall_timeout_s:
                raise franky_network_error(
                    f"the FR3's clock stopped for {self.config.stall_timeout_s:.1f} s during the home move"
                )
            ran_s = (now_ms - start_ms) / 1000.0
            if ran_s > plan.deadline_s:
                robot.stop()
                raise HomeRefused(
                    f"Home move did not finish within its deadline ({ran_s:.1f} s of robot time; "
                    f"{plan.describe()}); stopped. Check for obstacles; the deadline follows from "
                    "home_dynamics_factor."
                )
        return (int(robot.state.time.to_msec()) - start_ms) / 1000.0

    # --- state --------------------------------------------------------------------------------

    def read_state(self) -> RobotState:
        robot = self._robot_or_raise()
        state = robot.state
        self._check_mode(state)
        pose = state.O_T_EE
        gripper = self._gripper
        return RobotState(
            joint_positions_rad=np.asarray(state.q, float).reshape(7).copy(),
            joint_velocities_rad_s=np.asarray(state.dq, float).reshape(7).copy(),
            ee_position_m=np.asarray(pose.translation, float).reshape(3).copy(),
            ee_quat_xyzw=np.asarray(pose.quaternion, float).reshape(4).copy(),
            gripper_width_m=gripper.width_m if gripper is not None else 0.0,
            robot_time_s=state.time.to_msec() / 1000.0,
            object_held=gripper.object_held if gripper is not None else None,
        )

    def _check_mode(self, state: franky.RobotState) -> None:
        """A user stop or reflex the robot reports while no motion ran (so no exception told us)
        latches like one raised by a motion."""
        if self._failed_reason:
            return
        mode = str(getattr(state, "robot_mode", ""))
        if mode.endswith("UserStopped"):
            self.user_stops += 1
            self._latch(
                RobotFault.USER_STOP,
                "the FR3 reports its user stop engaged (robot mode UserStopped).",
                "Release the stop, check the cell, then reset (home) to resume.",
            )
        elif mode.endswith("Reflex"):
            # A communication_constraints_violation passes through Reflex too, until the motion
            # thread's automatic recovery (milliseconds): latch only a reflex that stays.
            now = time.monotonic()
            if self._reflex_seen_s is None:
                self._reflex_seen_s = now
            elif now - self._reflex_seen_s > _REFLEX_CONFIRM_S:
                self.reflexes += 1
                self._latch(
                    RobotFault.REFLEX,
                    f"the FR3 has reported a reflex for over {_REFLEX_CONFIRM_S} s (robot mode Reflex).",
                    "Check the workspace, then reset (home) to acknowledge and resume.",
                )
        else:
            self._reflex_seen_s = None

    @property
    def counters(self) -> dict[str, int]:
        gripper = self._gripper
        return {
            "reflex_recoveries": self.reflex_recoveries,
            "reflexes": self.reflexes,
            "user_stops": self.user_stops,
            "reconnects": self.reconnects,
            "network_errors": self.network_errors,
            "gripper_commands": gripper.commands_executed if gripper else 0,
            "gripper_commands_dropped": gripper.commands_dropped if gripper else 0,
            "gripper_errors": gripper.errors if gripper else 0,
            "gripper_halts": gripper.halts if gripper else 0,
        }

    @property
    def franky_robot(self) -> franky.Robot | None:
        """The underlying franky ``Robot`` (benchmarks, diagnostics). None while reconnecting."""
        return self._robot


def _current_errors(robot: franky.Robot) -> str:
    try:
        return str(robot.state.current_errors)
    except Exception as e:  # the state itself cannot be read: say so rather than nothing
        return f"errors unreadable: {type(e).__name__}: {e}"
