"""The measured arm stays within its limits: adversarial chunks through the real executor, safety
layer and simulated FR3 (fast pacing), with the measured TCP read after every control tick.

Stated bounds, for the MEASURED TCP (not the targets): inside the workspace box + ``BOX_TOL_M``
(0.0 mm) and at most the per-tick translation limit + ``STEP_TOL_M`` (0.0 mm) per tick, whatever the
chunks ask, while they run and while the arm holds afterwards. No tolerance is needed because the
sim plans its servo setpoints for the lag (robot_server/robots/sim/robot_sim.py): a setpoint's TCP
ends at most the per-tick step less 10 mm from the measured TCP (8 mm less again for joint targets)
and keeps 3 mm inside the box (8 mm more for joint-space sweeps), more than the tracking error
measured at the walls (<= 2.0 mm for straight pose moves, 7.6 mm in a 0.7 rad/s joint move) and
past a setpoint (6.2 mm). Measured (bench/bench_sim_limits.py, docs/robot-safety.md): 0.0 mm
outside and <= 42.7 mm per tick; before: up to 10.3 mm outside and 60.8 mm per tick.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import numpy as np
import pytest

from pde_contract.messages import ActionChunk, ActionSpace, ErrorCode, RobotState
from robot_server.executor import ChunkExecutor, ExecutorConfig
from robot_server.robots.sim import SimRobot
from robot_server.safety import FR3_JOINT_LOWER_RAD, FR3_JOINT_UPPER_RAD, SafetyError, SafetyLimits
from robot_server.sim.profile import SIM_PROFILES, load_profile
from robot_server.sim.world import SimWorld, SimWorldConfig

BOX_TOL_M = 0.0  # see the module docstring
STEP_TOL_M = 0.0
LIMITS = SafetyLimits()
_LO, _HI = np.array(LIMITS.workspace_min_m), np.array(LIMITS.workspace_max_m)


class Recorder:
    def __init__(self) -> None:
        self.states: list[RobotState] = []

    def __call__(self, state: RobotState) -> None:
        self.states.append(state)

    def positions(self) -> np.ndarray:
        return np.array([s.ee_position_m for s in self.states])


@pytest.fixture(scope="module", params=sorted(SIM_PROFILES))
def world(request: pytest.FixtureRequest) -> Iterator[SimWorld]:
    """Each sim speed profile in turn: the fast one (benchmarks) keeps the measured arm inside too."""
    w = SimWorld(SimWorldConfig(scene="table", profile=load_profile(request.param)))
    yield w
    w.close()


@pytest.fixture
def rig(world: SimWorld) -> Iterator[tuple[ChunkExecutor, Recorder]]:
    robot = SimRobot(
        world,
        max_tcp_step_m=LIMITS.max_step_translation_m,
        workspace_m=(LIMITS.workspace_min_m, LIMITS.workspace_max_m),
    )
    robot.connect()
    rec = Recorder()
    ex = ChunkExecutor(
        robot, ExecutorConfig(realtime=False, heartbeat_timeout_s=0, limits=LIMITS), on_tick=rec
    )
    ex.start()
    yield ex, rec
    ex.close()


_seq = itertools.count()


def run_chunk(
    ex: ChunkExecutor, rec: Recorder, space: ActionSpace, actions: np.ndarray, hold_ticks: int = 3
) -> None:
    ex.submit(
        ActionChunk(
            seq=next(_seq), episode_id="e", action_space=space, actions=actions, control_rate_hz=10.0
        ),
        b"test",
    )
    deadline = time.monotonic() + 60.0
    while ex.snapshot().executing_chunk_seq >= 0:
        assert time.monotonic() < deadline, "the chunk never finished"
        time.sleep(0.002)
    n = len(rec.states)
    while len(rec.states) < n + hold_ticks:  # holding ticks run at the control rate
        assert time.monotonic() < deadline, "the arm stopped ticking"
        time.sleep(0.01)


def assert_measured_within_limits(rec: Recorder) -> tuple[float, float]:
    p = rec.positions()
    assert len(p) > 20
    outside = np.linalg.norm(np.maximum(_LO - p, 0.0) + np.maximum(p - _HI, 0.0), axis=1)
    steps = np.linalg.norm(np.diff(p, axis=0), axis=1)
    assert outside.max() <= BOX_TOL_M, f"measured TCP {outside.max() * 1e3:.1f} mm outside the box"
    assert steps.max() <= LIMITS.max_step_translation_m + STEP_TOL_M, (
        f"a tick moved {steps.max() * 1e3:.1f} mm"
    )
    for s in rec.states:
        q = s.joint_positions_rad
        assert np.all(q >= FR3_JOINT_LOWER_RAD - 0.01) and np.all(q <= FR3_JOINT_UPPER_RAD + 0.01), q
    return float(outside.max()), float(steps.max())


# Every face, edge and corner direction of the box.
WALLS = [np.array(v, dtype=np.float64) for v in itertools.product((-1.0, 0.0, 1.0), repeat=3) if any(v)]


@pytest.mark.parametrize("rotate", [False, True], ids=["translate", "translate+rotate"])
def test_chunks_pushing_at_every_wall_keep_the_measured_tcp_in_the_box(
    rig: tuple[ChunkExecutor, Recorder], rotate: bool
) -> None:
    ex, rec = rig
    rng = np.random.default_rng(1)
    for wall in WALLS:
        a = np.zeros((12, 7))
        a[:, :3] = 0.5 * wall / np.linalg.norm(wall)  # 10x the per-tick limit, every row
        if rotate:
            a[:, 3:6] = rng.normal(0.0, 0.6, size=(12, 3))  # often above the rotation limit too
        a[:, 6] = rng.uniform(-0.05, 0.15)
        run_chunk(ex, rec, ActionSpace.EE_DELTA, a)
    assert_measured_within_limits(rec)


def test_joint_targets_anywhere_keep_the_measured_tcp_in_the_box(rig: tuple[ChunkExecutor, Recorder]) -> None:
    ex, rec = rig
    rng = np.random.default_rng(2)
    for _ in range(30):  # 30: the 20th carries the TCP 5.1 mm above the box without the lag margins
        a = np.zeros((8, 8))
        a[:, :7] = rng.uniform(FR3_JOINT_LOWER_RAD - 0.5, FR3_JOINT_UPPER_RAD + 0.5, size=(8, 7))
        a[:, 7] = 0.04
        run_chunk(ex, rec, ActionSpace.JOINT_ABS, a)
    assert_measured_within_limits(rec)


@pytest.mark.parametrize("failure", ["bad seed", "task layout raises"])
def test_a_reset_that_fails_leaves_the_arm_and_the_held_target_where_they_were(
    rig: tuple[ChunkExecutor, Recorder], failure: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ex, rec = rig
    a = np.zeros((6, 7))
    a[:, 0], a[:, 6] = 0.02, 0.08
    run_chunk(ex, rec, ActionSpace.EE_DELTA, a)
    before = ex.snapshot().state
    assert before is not None
    task, seed = "put_green_container_in_bowl", -1
    if failure == "task layout raises":
        from robot_server.sim import tasks

        task_obj = tasks.load(task)

        def broken(*args: object) -> None:
            raise RuntimeError("layout failed half-way")

        monkeypatch.setattr(task_obj, "reset", broken)
        monkeypatch.setattr(tasks, "load", lambda name: task_obj)
        seed = 3
    with pytest.raises(SafetyError, match=r"seed|half-way") as ei:
        ex.reset(task, seed, timeout_s=30.0)
    assert ei.value.code is ErrorCode.BACKEND_ERROR
    n = len(rec.states)
    deadline = time.monotonic() + 30.0
    while len(rec.states) < n + 5:  # a few holding ticks after the failed reset
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for s in rec.states[n:]:
        assert np.linalg.norm(s.ee_position_m - before.ee_position_m) < 0.003
    held = ex._plan_start().ee_position_m
    assert np.linalg.norm(held - before.ee_position_m) < 0.003
