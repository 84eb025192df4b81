import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from pde_contract.messages import ActionChunk, ActionSpace, ErrorCode
from pde_contract.rotations import quat_angle_rad, quat_from_rotvec, quat_multiply
from robot_server import safety
from robot_server.safety import (
    FR3_JOINT_LOWER_RAD,
    FR3_JOINT_UPPER_RAD,
    ClipPolicy,
    PlanStart,
    SafetyError,
    SafetyLimits,
    check_chunk,
    check_gripper_width,
    fr3_tcp_position_m,
    plan_chunk,
)

LIMITS = SafetyLimits()
PERIOD_S = 0.1
SPACES = [ActionSpace.EE_DELTA, ActionSpace.JOINT_ABS]
START = PlanStart(
    ee_position_m=np.array([0.45, 0.0, 0.35]),
    ee_quat_xyzw=np.array([1.0, 0.0, 0.0, 0.0]),
    joint_positions_rad=np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785]),
    gripper_width_m=0.08,
)


def chunk(
    actions: np.ndarray, space: ActionSpace = ActionSpace.EE_DELTA, rate_hz: float = 10.0
) -> ActionChunk:
    return ActionChunk(seq=0, episode_id="e", action_space=space, actions=actions, control_rate_hz=rate_hz)


def refused(c: ActionChunk, code: ErrorCode = ErrorCode.INVALID_ACTION) -> str:
    with pytest.raises(SafetyError) as ei:
        check_chunk(c, 10.0, SPACES, LIMITS)
    assert ei.value.code is code
    return ei.value.message


def test_valid_chunk_passes_as_float64() -> None:
    out = check_chunk(chunk(np.zeros((10, 7), np.float32)), 10.0, SPACES, LIMITS)
    assert out.dtype == np.float64 and out.shape == (10, 7)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused_with_position(bad: float) -> None:
    a = np.zeros((5, 7))
    a[3, 2] = bad
    msg = refused(chunk(a))
    assert "row 3, column 2" in msg and "NaN/inf" in msg


@pytest.mark.parametrize("shape", [(10,), (10, 6), (10, 8), (0, 7), (2, 3, 7)])
def test_wrong_shapes_are_refused(shape: tuple[int, ...]) -> None:
    msg = refused(chunk(np.zeros(shape)))
    assert "[T, 7]" in msg


def test_joint_space_needs_eight_columns() -> None:
    assert "[T, 8]" in refused(chunk(np.zeros((4, 7)), ActionSpace.JOINT_ABS))


def test_too_many_rows_are_refused() -> None:
    assert "shorter chunks" in refused(chunk(np.zeros((LIMITS.max_chunk_steps + 1, 7))))


def test_wrong_control_rate_is_refused() -> None:
    msg = refused(chunk(np.zeros((4, 7)), rate_hz=15.0))
    assert "15.0" in msg and "10.0 Hz" in msg and "resample" in msg


def test_unsupported_action_space_is_refused() -> None:
    with pytest.raises(SafetyError, match="use one of ee_delta") as ei:
        check_chunk(chunk(np.zeros((4, 8)), ActionSpace.JOINT_ABS), 10.0, [ActionSpace.EE_DELTA], LIMITS)
    assert ei.value.code is ErrorCode.INVALID_ACTION


def test_non_float_actions_are_refused() -> None:
    assert "float array" in refused(chunk(np.zeros((4, 7), dtype=bool)))


def test_small_deltas_are_applied_exactly() -> None:
    a = np.zeros((4, 7))
    a[:, 0] = 0.01
    a[:, 6] = 0.03
    plan = plan_chunk(a, ActionSpace.EE_DELTA, START, LIMITS, PERIOD_S)
    assert plan.steps_clipped == 0
    np.testing.assert_allclose([t.ee_position_m[0] for t in plan.targets], [0.46, 0.47, 0.48, 0.49])  # type: ignore[index]
    assert all(t.gripper_width_m == 0.03 for t in plan.targets)


def test_rotation_deltas_compose_in_base_frame() -> None:
    a = np.zeros((2, 7))
    a[:, 5] = 0.1  # about base z
    a[:, 6] = 0.08
    plan = plan_chunk(a, ActionSpace.EE_DELTA, START, LIMITS, PERIOD_S)
    assert plan.targets[-1].ee_quat_xyzw is not None
    assert quat_angle_rad(START.ee_quat_xyzw, plan.targets[-1].ee_quat_xyzw) == pytest.approx(0.2, abs=1e-9)


def test_big_translation_step_is_clipped_and_counted() -> None:
    a = np.zeros((1, 7))
    a[0, 1] = 0.3
    a[0, 6] = 0.08
    plan = plan_chunk(a, ActionSpace.EE_DELTA, START, LIMITS, PERIOD_S)
    assert plan.steps_clipped == 1 and "translation step" in plan.notes[0]
    assert plan.targets[0].ee_position_m is not None
    assert np.linalg.norm(plan.targets[0].ee_position_m - START.ee_position_m) == pytest.approx(0.05)


def test_target_below_table_is_clipped_to_workspace() -> None:
    a = np.zeros((20, 7))
    a[:, 2] = -0.04  # 0.8 m down from 0.35 m
    a[:, 6] = 0.08
    plan = plan_chunk(a, ActionSpace.EE_DELTA, START, LIMITS, PERIOD_S)
    zs = [t.ee_position_m[2] for t in plan.targets]  # type: ignore[index]
    assert min(zs) == pytest.approx(LIMITS.workspace_min_m[2])
    assert plan.steps_clipped > 0 and "workspace" in " ".join(plan.notes)


def test_reject_policy_refuses_instead_of_clipping() -> None:
    a = np.zeros((3, 7))
    a[1, 0] = 1.0
    limits = SafetyLimits(clip_policy=ClipPolicy.REJECT)
    with pytest.raises(SafetyError, match="row 1") as ei:
        plan_chunk(a, ActionSpace.EE_DELTA, START, limits, PERIOD_S)
    assert ei.value.code is ErrorCode.UNSAFE


def test_joint_targets_respect_margins_and_velocity() -> None:
    a = np.zeros((30, 8))
    a[:, :7] = FR3_JOINT_UPPER_RAD + 1.0
    a[:, 7] = 0.2  # gripper too wide
    plan = plan_chunk(a, ActionSpace.JOINT_ABS, START, LIMITS, PERIOD_S)
    q_prev = START.joint_positions_rad
    max_step = LIMITS.max_joint_step_rad(PERIOD_S)
    for t in plan.targets:
        assert t.joint_positions_rad is not None
        assert np.all(t.joint_positions_rad <= FR3_JOINT_UPPER_RAD - LIMITS.joint_margin_rad + 1e-12)
        assert np.all(np.abs(t.joint_positions_rad - q_prev) <= max_step + 1e-12)
        assert t.gripper_width_m == 0.08
        q_prev = t.joint_positions_rad
    assert plan.steps_clipped == 30


def test_gripper_width_check() -> None:
    assert check_gripper_width(0.05, LIMITS) == 0.05
    for bad in (-0.01, 0.09, math.nan):
        with pytest.raises(SafetyError, match=r"\[0.0, 0.08\]"):
            check_gripper_width(bad, LIMITS)


def test_limits_validate_themselves() -> None:
    with pytest.raises(ValueError, match="must be below"):
        SafetyLimits(workspace_min_m=(0.5, 0.0, 0.0), workspace_max_m=(0.4, 1.0, 1.0))
    with pytest.raises(ValueError, match="stroke"):
        SafetyLimits(gripper_max_m=0.1)


def test_quaternion_helpers() -> None:
    q = quat_from_rotvec(np.array([0.0, 0.0, math.pi / 2]))
    np.testing.assert_allclose(q, [0, 0, math.sin(math.pi / 4), math.cos(math.pi / 4)])
    assert quat_angle_rad(q, quat_multiply(q, quat_from_rotvec(np.array([0.3, 0, 0])))) == pytest.approx(0.3)
    np.testing.assert_allclose(quat_from_rotvec(np.zeros(3)), [0, 0, 0, 1])


def tool_axis(q: np.ndarray) -> np.ndarray:
    """Tool z axis (third rotation-matrix column) of the unit quaternion q = (x, y, z, w)."""
    x, y, z, w = q / np.linalg.norm(q)
    return np.array([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)])


finite = st.floats(min_value=-5.0, max_value=5.0, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 20), st.just(7)), elements=finite))
def test_ee_plans_never_leave_the_limits(actions: np.ndarray) -> None:
    plan = plan_chunk(actions, ActionSpace.EE_DELTA, START, LIMITS, PERIOD_S)
    lo, hi = np.array(LIMITS.workspace_min_m), np.array(LIMITS.workspace_max_m)
    pos, quat = START.ee_position_m, START.ee_quat_xyzw
    for t in plan.targets:
        assert t.ee_position_m is not None and t.ee_quat_xyzw is not None
        assert np.all(t.ee_position_m >= lo - 1e-12) and np.all(t.ee_position_m <= hi + 1e-12)
        assert np.linalg.norm(t.ee_position_m - pos) <= LIMITS.max_step_translation_m + 1e-9
        assert quat_angle_rad(quat, t.ee_quat_xyzw) <= LIMITS.max_step_rotation_rad + 1e-6
        assert LIMITS.gripper_min_m <= t.gripper_width_m <= LIMITS.gripper_max_m
        flange = t.ee_position_m - tool_axis(t.ee_quat_xyzw) * (0.107 + 0.1034)
        assert np.linalg.norm(flange - np.array(LIMITS.shoulder_m)) <= LIMITS.max_flange_reach_m + 1e-6
        # the orientation envelope: the tool points at most max_tool_tilt_rad away from down
        assert -tool_axis(t.ee_quat_xyzw)[2] >= math.cos(LIMITS.max_tool_tilt_rad) - 1e-9
        pos, quat = t.ee_position_m, t.ee_quat_xyzw


@settings(max_examples=150, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 20), st.just(8)), elements=finite))
def test_joint_plans_never_leave_the_limits(actions: np.ndarray) -> None:
    plan = plan_chunk(actions, ActionSpace.JOINT_ABS, START, LIMITS, PERIOD_S)
    p_prev = fr3_tcp_position_m(START.joint_positions_rad)
    for t in plan.targets:
        q = t.joint_positions_rad
        assert q is not None
        # the same per-tick TCP step limit as ee_delta chunks
        assert np.linalg.norm(fr3_tcp_position_m(q) - p_prev) <= LIMITS.max_step_translation_m + 1e-9
        p_prev = fr3_tcp_position_m(q)
        assert np.all(q >= FR3_JOINT_LOWER_RAD + LIMITS.joint_margin_rad - 1e-12)
        assert np.all(q <= FR3_JOINT_UPPER_RAD - LIMITS.joint_margin_rad + 1e-12)
        p = fr3_tcp_position_m(q)
        assert np.all(p >= np.array(LIMITS.workspace_min_m) - 1e-9)
        assert np.all(p <= np.array(LIMITS.workspace_max_m) + 1e-9)


def test_fr3_forward_kinematics_matches_the_sim_model() -> None:
    from robot_server.robots.sim import SimRobot
    from robot_server.sim.world import SimWorld, SimWorldConfig

    world = SimWorld(SimWorldConfig(scene="table"))
    try:
        robot = SimRobot(world)
        rng = np.random.default_rng(0)
        for q in rng.uniform(FR3_JOINT_LOWER_RAD, FR3_JOINT_UPPER_RAD, size=(20, 7)):
            np.testing.assert_allclose(fr3_tcp_position_m(q), robot.ik.forward(q)[0], atol=1e-9)
    finally:
        world.close()


def test_joint_targets_that_leave_the_workspace_hold() -> None:
    a = np.zeros((40, 8))
    a[:, :7] = START.joint_positions_rad
    a[:, 3] = -0.6  # stretch the elbow: the TCP goes up and forward, out of the box
    a[:, 7] = 0.08
    p_target = fr3_tcp_position_m(a[0, :7])
    assert np.any(p_target > np.array(LIMITS.workspace_max_m))  # the request does leave the box
    plan = plan_chunk(a, ActionSpace.JOINT_ABS, START, LIMITS, PERIOD_S)
    assert plan.steps_clipped > 0
    lo, hi = np.array(LIMITS.workspace_min_m), np.array(LIMITS.workspace_max_m)
    for t in plan.targets:
        assert t.joint_positions_rad is not None
        p = fr3_tcp_position_m(t.joint_positions_rad)
        assert np.all(p >= lo - 1e-9) and np.all(p <= hi + 1e-9)
    # it moved toward the request until the TCP met the box, then held there
    last, prev = plan.targets[-1].joint_positions_rad, plan.targets[-2].joint_positions_rad
    assert last is not None and prev is not None
    np.testing.assert_array_equal(last, prev)
    p_last = fr3_tcp_position_m(last)
    assert np.linalg.norm(p_last - fr3_tcp_position_m(START.joint_positions_rad)) > 0.02
    assert min(np.min(p_last - lo), np.min(hi - p_last)) < 0.03  # stopped near a face of the box


@settings(max_examples=100, deadline=None)
@given(arrays(np.float64, st.tuples(st.integers(1, 6), st.just(7)), elements=st.floats(-0.02, 0.02)))
def test_unclipped_fast_path_equals_the_row_by_row_plan(actions: np.ndarray) -> None:
    actions[:, 6] = 0.04
    fast = plan_chunk(actions, ActionSpace.EE_DELTA, START, LIMITS, PERIOD_S)
    slow = safety._plan_rows(actions, ActionSpace.EE_DELTA, START, LIMITS, PERIOD_S)
    # 6 rows of at most 2 cm stay inside the default box from START: nothing to clip
    assert fast.steps_clipped == slow.steps_clipped == 0
    for a, b in zip(fast.targets, slow.targets, strict=True):
        np.testing.assert_allclose(a.ee_position_m, b.ee_position_m, atol=1e-12)  # type: ignore[arg-type]
        np.testing.assert_allclose(a.ee_quat_xyzw, b.ee_quat_xyzw, atol=1e-12)  # type: ignore[arg-type]
        assert a.gripper_width_m == b.gripper_width_m


def test_the_readme_states_the_default_workspace_box() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    lo, hi = LIMITS.workspace_min_m, LIMITS.workspace_max_m
    assert -lo[1] == hi[1], "the README writes y as ±"
    stated = f"default x {lo[0]:g}–{hi[0]:g}, y ±{hi[1]:g}, z {lo[2]:g}–{hi[2]:g} m"
    assert stated in readme.replace("\n  ", " "), f"README.md should say {stated!r}"


def test_rotations_stop_at_the_orientation_envelope() -> None:
    a = np.zeros((12, 7))
    a[:, 3] = 0.2  # tilt about x, 0.2 rad per row: 2.4 rad asked
    a[:, 6] = 0.08
    plan = plan_chunk(a, ActionSpace.EE_DELTA, START, LIMITS, PERIOD_S)
    tilts = [math.acos(-tool_axis(t.ee_quat_xyzw)[2]) for t in plan.targets if t.ee_quat_xyzw is not None]
    assert max(tilts) <= LIMITS.max_tool_tilt_rad + 1e-9 and max(tilts) > LIMITS.max_tool_tilt_rad - 0.2
    assert plan.steps_clipped > 0 and "tilt the tool" in plan.notes[0]
    # and back: rotating toward down is always allowed
    last = plan.targets[-1]
    assert last.ee_position_m is not None and last.ee_quat_xyzw is not None
    tilted = PlanStart(last.ee_position_m, last.ee_quat_xyzw, START.joint_positions_rad, 0.08)
    a[:, 3] = -0.2
    assert plan_chunk(a[:3], ActionSpace.EE_DELTA, tilted, LIMITS, PERIOD_S).steps_clipped == 0


def test_rotations_about_the_tool_axis_stop_short_of_joint_7s_limit() -> None:
    a = np.zeros((30, 7))
    a[:, 5] = -0.2  # the tool points down (-z): turning about -z turns joint 7 up by 0.2 rad per row
    a[:, 6] = 0.08
    plan = plan_chunk(a, ActionSpace.EE_DELTA, START, LIMITS, PERIOD_S)
    room = LIMITS.wrist_max_rad - START.joint_positions_rad[6]  # 2.13 rad of the 6 asked
    last = plan.targets[-1]
    assert last.ee_quat_xyzw is not None and last.ee_position_m is not None
    turned = quat_angle_rad(START.ee_quat_xyzw, last.ee_quat_xyzw)
    assert room - 0.2 < turned <= room + 1e-9
    assert plan.steps_clipped > 0 and any("joint 7" in n for n in plan.notes)
    # tilting at the wrist's limit still works (only the part about the tool axis is dropped) ...
    near = PlanStart(
        last.ee_position_m,
        last.ee_quat_xyzw,
        np.r_[START.joint_positions_rad[:6], START.joint_positions_rad[6] + turned],
        0.08,
    )
    tilt = np.zeros((1, 7))
    tilt[0, 3], tilt[0, 5], tilt[0, 6] = 0.1, -0.1, 0.08
    t = plan_chunk(tilt, ActionSpace.EE_DELTA, near, LIMITS, PERIOD_S).targets[0]
    assert t.ee_quat_xyzw is not None
    assert math.acos(-tool_axis(t.ee_quat_xyzw)[2]) == pytest.approx(0.1, abs=1e-3)
    # ... and turning back is always allowed
    a[:, 5] = 0.2
    assert plan_chunk(a[:3], ActionSpace.EE_DELTA, near, LIMITS, PERIOD_S).steps_clipped == 0
