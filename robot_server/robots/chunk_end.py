"""How far the measured arm goes past a chunk's final target, and whether it leaves the workspace
box. Used by bench/bench_chunk_end_overshoot.py and the tests, on franky-sim and the MuJoCo sim.

A case runs through the real executor and safety layer: ``ee_delta`` rows of at most 4 cm bring
the arm to the case's start, it settles, then one chunk of ``rows`` rows of ``step_m`` per tick
moves down onto the box's floor, down into it (the last rows clipped at the floor) or sideways,
in either action space, while a sampler records the measured TCP and joints until the arm has
settled again. Only what the executor and the backends offered before the chunk-end fix is used
here, so the benchmark measures the old code with this same module.
"""

from __future__ import annotations

import abc
import itertools
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pde_contract.messages import ActionChunk, ActionSpace, RobotState
from robot_server.executor import ChunkExecutor
from robot_server.robots.base import FaultReport, Robot, RobotTarget
from robot_server.safety import SafetyLimits, fr3_tcp_position_m

PERIOD_S = 0.1  # 10 Hz, the executor's default control rate
POSITIONING_STEP_M = 0.04
OPEN_M = 0.08
# A slowed simulator's ticks (robot time) may differ by this ratio before a case is run again: a
# simulator starved of CPU now and then makes uneven ones, and then the figures mean little.
MAX_PERIOD_SPREAD = 2.0
# (direction, where the chunk starts): "down" ends exactly on the box's floor, "down_clipped" asks
# for two rows below it (the safety layer stops them at the floor), "side" ends inside the box.
DIRECTIONS: dict[str, tuple[float, float, float]] = {
    "down": (0.0, 0.0, -1.0),
    "down_clipped": (0.0, 0.0, -1.0),
    "side": (0.0, 1.0, 0.0),
}
_XY_M = (0.40, 0.0)
_SIDE_START_M = (0.40, -0.15, 0.20)


@dataclass(frozen=True)
class ChunkEndCase:
    space: ActionSpace
    direction: str  # a key of DIRECTIONS
    step_m: float  # per row (tick)
    rows: int = 5

    @property
    def name(self) -> str:
        return f"{self.space.value}/{self.direction}/{self.step_m * 100:.0f}cm"

    @property
    def unit(self) -> np.ndarray:
        return np.array(DIRECTIONS[self.direction])

    def start_m(self, floor_m: float) -> np.ndarray:
        if self.direction == "side":
            return np.array(_SIDE_START_M)
        rows_to_floor = self.rows - 2 if self.direction == "down_clipped" else self.rows
        return np.array([*_XY_M, floor_m + rows_to_floor * self.step_m])


def all_cases(steps_m: tuple[float, ...] = (0.01, 0.03, 0.05)) -> list[ChunkEndCase]:
    return [
        ChunkEndCase(space, direction, step)
        for space, direction, step in itertools.product(
            (ActionSpace.EE_DELTA, ActionSpace.JOINT_ABS), DIRECTIONS, steps_m
        )
    ]


@dataclass
class Samples:
    """Measured TCP positions and joint angles with the robot's clock, in order."""

    time_s: list[float] = field(default_factory=list)
    tcp_m: list[np.ndarray] = field(default_factory=list)
    q_rad: list[np.ndarray] = field(default_factory=list)

    def add(self, time_s: float, tcp_m: np.ndarray, q_rad: np.ndarray) -> None:
        self.time_s.append(float(time_s))
        self.tcp_m.append(np.array(tcp_m, float))
        self.q_rad.append(np.array(q_rad, float))


class ArmSampler(abc.ABC):
    """Records the measured arm while active (between ``start`` and ``stop``)."""

    def __init__(self) -> None:
        self.samples = Samples()

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...


class PolledSampler(ArmSampler):
    """Reads the backend's state from a thread (the FR3 backend: libfranka's 1 kHz state)."""

    def __init__(self, read_state: Callable[[], RobotState], period_s: float = 0.004) -> None:
        super().__init__()
        self._read = read_state
        self._period_s = period_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                s = self._read()
            except Exception:  # a reconnect in progress: the next read tells
                pass
            else:
                self.samples.add(s.robot_time_s, s.ee_position_m, s.joint_positions_rad)
            time.sleep(self._period_s)

    def start(self) -> None:
        self.samples = Samples()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="chunk-end-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)


class PhysicsStepSampler(ArmSampler):
    """Reads the MuJoCo sim at every physics step (2 ms) through MuJoCo's control callback: the
    sim advances only inside ``command()``, so a thread would see it once per tick. MuJoCo's
    callback is process-wide: steps of any other model or data in the process (another world, the
    IK solver's scratch data) are ignored, or they would add foreign samples or index out of range."""

    def __init__(self, tcp_site_id: int, arm_qpos_adr: np.ndarray, lock: Any, data: Any) -> None:
        super().__init__()
        self._data = data
        self._site = tcp_site_id
        self._qpos = np.asarray(arm_qpos_adr)
        self._lock = lock  # the sim world's: no physics step runs while the callback changes

    def _callback(self, model: Any, data: Any) -> None:
        if data is not self._data:
            return
        self.samples.add(data.time, data.site_xpos[self._site], data.qpos[self._qpos])

    def start(self) -> None:
        import mujoco

        with self._lock:
            self.samples = Samples()
            mujoco.set_mjcb_control(self._callback)

    def stop(self) -> None:
        import mujoco

        with self._lock:
            mujoco.set_mjcb_control(None)


class SlowedSimRobot(Robot):
    """A simulator slower than real time (on a loaded machine) behind an executor paced at
    ``speed`` x its rate: the backend is given each tick's period in robot time (the robot-time
    length of the last tick), so in the robot's time the stream runs as at full speed. For a
    machine that cannot run the simulator in real time."""

    def __init__(self, inner: Robot, speed: float) -> None:
        self.inner, self.speed, self.name = inner, speed, inner.name
        self._last_robot_s: float | None = None
        self.periods_s: list[float] = []  # robot-time periods given to the backend

    def connect(self) -> None:
        self.inner.connect()

    def disconnect(self) -> None:
        self.inner.disconnect()

    @property
    def is_connected(self) -> bool:
        return self.inner.is_connected

    def read_state(self) -> RobotState:
        return self.inner.read_state()

    def command(self, target: RobotTarget, period_s: float) -> None:
        nominal_s = period_s * self.speed
        now_s = self.inner.read_state().robot_time_s
        last, self._last_robot_s = self._last_robot_s, now_s
        robot_s = nominal_s if last is None else min(max(now_s - last, 0.25 * nominal_s), 4.0 * nominal_s)
        self.periods_s.append(robot_s)
        self.inner.command(target, robot_s)

    def hold(self) -> None:
        self.inner.hold()

    def home(
        self, task: str = "", seed: int | None = None, joints_rad: Sequence[float] | None = None
    ) -> None:
        self.inner.home(task, seed, joints_rad)

    def fault(self) -> FaultReport | None:
        return self.inner.fault()


class FciSimProcess:
    """franky-sim in a process of its own (``python -m robot_server.robots.franka.fci_sim``): its
    1 kHz Python loop then does not share an interpreter lock with the client under test, which
    let an in-process simulator fall to 0.3-0.6x real time on a loaded 2-core machine."""

    def __init__(self, speed: float = 1.0, start_timeout_s: float = 120.0) -> None:
        self._speed = speed
        self._timeout_s = start_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self.host = ""

    def __enter__(self) -> FciSimProcess:
        cmd = [sys.executable, "-m", "robot_server.robots.franka.fci_sim", "--speed", str(self._speed)]
        # the simulator is the rig, not the code under test: always this checkout's
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        self._proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        deadline = time.monotonic() + self._timeout_s
        seen: list[str] = []
        assert self._proc.stdout is not None
        while time.monotonic() < deadline:
            line = self._proc.stdout.readline()
            if not line:
                break  # exited
            seen.append(line)
            found = re.search(r"PDE_FRANKA_HOST=(\S+)", line)
            if found:
                self.host = found.group(1)
                # keep draining its output, so a chatty simulator never blocks on a full pipe
                threading.Thread(target=self._proc.stdout.read, daemon=True).start()
                return self
        self.__exit__()
        raise RuntimeError("franky-sim did not start: " + "".join(seen[-20:]))

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(10.0)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


class TickStates:
    """The executor's ``on_tick``: the measured state after every control tick."""

    def __init__(self) -> None:
        self.states: list[RobotState] = []

    def __call__(self, state: RobotState) -> None:
        self.states.append(state)


def box_distance_m(p: np.ndarray, limits: SafetyLimits) -> np.ndarray:
    """Distance of each point in ``p`` ([n, 3]) outside the workspace box (0 inside)."""
    lo, hi = np.asarray(limits.workspace_min_m), np.asarray(limits.workspace_max_m)
    return np.linalg.norm(np.maximum(lo - p, 0.0) + np.maximum(p - hi, 0.0), axis=-1)


def _tcp_jacobian(q: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    p = fr3_tcp_position_m(q)
    return np.stack([(fr3_tcp_position_m(q + eps * e) - p) / eps for e in np.eye(7)], axis=1)


def joint_rows_along(q0: np.ndarray, unit: np.ndarray, step_m: float, rows: int) -> np.ndarray:
    """Joint targets whose TCP (FR3 forward kinematics, as the safety layer computes it) moves
    ``step_m`` per row along ``unit`` from where ``q0`` puts it."""
    p0 = fr3_tcp_position_m(q0)
    q = np.array(q0, float)
    out = []
    for k in range(1, rows + 1):
        goal = p0 + k * step_m * unit
        for _ in range(10):  # Newton on the position only (minimum-norm joint steps)
            err = goal - fr3_tcp_position_m(q)
            if np.linalg.norm(err) < 1e-7:
                break
            q = q + np.linalg.pinv(_tcp_jacobian(q)) @ err
        out.append(q.copy())
    return np.array(out)


class ChunkEndRig:
    """One backend behind a running executor, with a sampler and the tick states."""

    def __init__(
        self,
        executor: ChunkExecutor,
        sampler: ArmSampler,
        ticks: TickStates,
        limits: SafetyLimits,
        control_rate_hz: float = 1.0 / PERIOD_S,
    ) -> None:
        self.control_rate_hz = control_rate_hz
        self.executor = executor
        self.sampler = sampler
        self.ticks = ticks
        self.limits = limits
        self._seq = itertools.count()

    def _run(self, space: ActionSpace, actions: np.ndarray, timeout_s: float = 60.0) -> int:
        """Run one chunk to its end; the number of rows the safety layer clipped."""
        ex = self.executor
        accepted, _ = ex.submit(
            ActionChunk(
                seq=next(self._seq),
                episode_id="chunk-end",
                action_space=space,
                actions=actions,
                control_rate_hz=self.control_rate_hz,
            ),
            b"chunk-end",
        )
        deadline = time.monotonic() + timeout_s
        while ex.snapshot().executing_chunk_seq >= 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"a {space.value} chunk of {len(actions)} rows did not finish")
            time.sleep(0.02)
        return int(accepted.steps_clipped)

    def _held(self) -> RobotTarget | None:
        # The executor holds a finished chunk's last row: the arm's final target.
        return self.executor._held

    def _held_position_m(self) -> np.ndarray:
        held = self._held()
        if held is not None and held.ee_position_m is not None:
            return np.asarray(held.ee_position_m, float)
        state = self.executor.snapshot().state
        assert state is not None
        return np.asarray(state.ee_position_m, float)

    def settle(self, robot_s: float, timeout_s: float = 120.0) -> None:
        """Hold for ``robot_s`` of the robot's own time (a simulator may run slower than the wall)."""
        state = self.executor.snapshot().state
        assert state is not None
        start_s, deadline = state.robot_time_s, time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.executor.snapshot().state
            if state is not None and state.robot_time_s - start_s >= robot_s:
                return
            time.sleep(0.02)
        raise TimeoutError(f"the robot's clock did not advance {robot_s} s within {timeout_s} s")

    def _settle_until_still(self, window_s: float = 0.2, still_m: float = 0.0005, max_s: float = 5.0) -> None:
        """Go on holding while the measured TCP still moves (an arm that lagged its stream is still
        on its way), up to ``max_s`` of robot time."""
        for _ in range(int(max_s / window_s)):
            before = self.executor.snapshot().state
            self.settle(window_s)
            after = self.executor.snapshot().state
            assert before is not None and after is not None
            if np.linalg.norm(after.ee_position_m - before.ee_position_m) < still_m:
                return

    def move_to(self, position_m: np.ndarray, settle_s: float) -> None:
        """Bring the held target to ``position_m`` in rows of at most 4 cm, then let it settle."""
        delta = np.asarray(position_m, float) - self._held_position_m()
        n = max(1, math.ceil(float(np.linalg.norm(delta)) / POSITIONING_STEP_M))
        actions = np.zeros((n, 7))
        actions[:, :3] = delta / n
        actions[:, 6] = OPEN_M
        self._run(ActionSpace.EE_DELTA, actions)
        self.settle(settle_s)

    def run(self, case: ChunkEndCase, settle_s: float = 1.0) -> dict[str, Any]:
        """Position, run the case's chunk, and measure it (figures in metres and radians);
        ``settle_s`` of robot time after each."""
        floor_m = self.limits.workspace_min_m[2]
        self.move_to(case.start_m(floor_m), settle_s)
        unit = case.unit
        state = self.executor.snapshot().state
        assert state is not None
        if case.space is ActionSpace.EE_DELTA:
            actions = np.zeros((case.rows, 7))
            actions[:, :3] = case.step_m * unit
        else:
            q0 = np.asarray(state.joint_positions_rad, float)
            step_m = case.step_m
            if case.direction == "down":  # end 0.5 mm above the floor as the safety layer sees it
                step_m = (float(fr3_tcp_position_m(q0)[2]) - floor_m - 0.0005) / case.rows
            # a hair below the per-tick limit: a step of exactly the limit may round to above it
            rows = joint_rows_along(
                q0, unit, min(step_m, self.limits.max_step_translation_m - 1e-5), case.rows
            )
            actions = np.zeros((case.rows, 8))
            actions[:, :7] = rows
        actions[:, -1] = OPEN_M
        first_tick = len(self.ticks.states)
        errors_before = self.executor.snapshot().counters.backend_errors
        self.sampler.start()
        wall_start = time.monotonic()
        try:
            clipped = self._run(case.space, actions)
            self.settle(settle_s)
            self._settle_until_still()
        finally:
            self.sampler.stop()
        wall_s = time.monotonic() - wall_start
        snap = self.executor.snapshot()
        robot = self.executor.robot
        periods = robot.periods_s[-(case.rows + 1) :] if isinstance(robot, SlowedSimRobot) else []
        held = self._held()
        q_final = None if held is None else held.joint_positions_rad
        tcp = np.array(self.sampler.samples.tcp_m)
        q = np.array(self.sampler.samples.q_rad)
        if not len(tcp):
            raise RuntimeError(f"{case.name}: no measured samples (the sampler saw nothing)")
        rest_m = tcp[-max(1, len(tcp) // 20) :].mean(axis=0)  # the last 5% of the samples
        if q_final is None:
            final_m = self._held_position_m()
            reference = "the chunk's final target"
        else:
            # the final joint target's TCP by FR3 kinematics, corrected by how far those kinematics
            # are from the backend's own (its TCP frame, its model) where the arm settled
            q_rest = q[-max(1, len(q) // 20) :].mean(axis=0)
            final_m = fr3_tcp_position_m(q_final) + rest_m - fr3_tcp_position_m(q_rest)
            reference = "the final joint target's TCP (FR3 kinematics, offset to the backend's at rest)"
        ticks = np.array([s.ee_position_m for s in self.ticks.states[max(0, first_tick - 1) :]])
        steps = np.linalg.norm(np.diff(ticks, axis=0), axis=1) if len(ticks) > 1 else np.zeros(1)
        figures: dict[str, Any] = {
            "case": case.name,
            "action_space": case.space.value,
            "direction": case.direction,
            "step_m": case.step_m,
            "rows": case.rows,
            "rows_clipped": clipped,
            "overshoot_m": max(0.0, float(np.max((tcp - final_m) @ unit))),
            "overshoot_reference": reference,
            "final_target_m": np.round(final_m, 5).tolist(),
            "settled_error_m": float(np.linalg.norm(rest_m - final_m)),
            "outside_box_max_m": float(np.max(box_distance_m(tcp, self.limits))),
            "tcp_lowest_z_m": float(np.min(tcp[:, 2])),
            "tcp_step_per_tick_max_m": float(np.max(steps)),
            "samples": len(tcp),
            # robot time over wall time while the chunk ran and settled: a simulator starved of CPU
            # falls behind the executor's wall-clock ticks and its figures mean little
            "sim_speed": (self.sampler.samples.time_s[-1] - self.sampler.samples.time_s[0]) / wall_s,
            "robot_period_s": [round(p, 4) for p in periods],  # slowed simulator: per tick of the chunk
            "backend_errors": snap.counters.backend_errors - errors_before,
            "last_error": snap.last_error,
        }
        if q_final is not None:  # the same, in joint space along the chunk's joint displacement
            way = (q_final - q[0]) / max(float(np.linalg.norm(q_final - q[0])), 1e-9)
            figures["joint_overshoot_rad"] = max(0.0, float(np.max((q - q_final) @ way)))
        return figures
