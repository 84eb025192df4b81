"""pde_contract.rotations: [x, y, z, w] quaternions, Hamilton products, base-frame rotation vectors."""

import math

import mujoco
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pde_contract.rotations import (
    quat_angle_rad,
    quat_conjugate,
    quat_from_matrix,
    quat_from_rotvec,
    quat_multiply,
    quat_to_matrix,
    quat_to_rotvec,
    quat_wxyz_from_xyzw,
    quat_xyzw_from_wxyz,
    quat_z_axis,
    quat_z_axis_floats,
    rotvec_between,
)

finite = st.floats(-1.0, 1.0, allow_nan=False)
unit_quats = (
    st.tuples(finite, finite, finite, finite)
    .filter(lambda q: np.linalg.norm(q) > 0.1)
    .map(lambda q: np.asarray(q) / np.linalg.norm(q))
)
# angles below pi: the rotation vector of a rotation by exactly pi has two answers
rotvecs = st.tuples(finite, finite, finite).filter(lambda r: np.linalg.norm(r) < 3.0).map(np.asarray)


def same_rotation(a: np.ndarray, b: np.ndarray, atol: float = 1e-12) -> bool:
    return bool(np.allclose(a, b, atol=atol) or np.allclose(a, -b, atol=atol))


def test_known_rotations() -> None:
    s = math.sqrt(0.5)
    # 90 degrees about z: x -> y
    q = quat_from_rotvec([0.0, 0.0, math.pi / 2])
    np.testing.assert_allclose(q, [0, 0, s, s], atol=1e-15)
    np.testing.assert_allclose(quat_to_matrix(q) @ [1, 0, 0], [0, 1, 0], atol=1e-15)
    # 180 degrees about x: the tool axis of a gripper pointing down
    down = np.array([1.0, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(quat_z_axis(down), [0, 0, -1])
    np.testing.assert_allclose(quat_to_matrix(down), np.diag([1.0, -1.0, -1.0]))
    np.testing.assert_array_equal(quat_from_rotvec(np.zeros(3)), [0, 0, 0, 1])
    np.testing.assert_array_equal(quat_to_rotvec([0, 0, 0, 1]), np.zeros(3))


def test_product_order_applies_the_right_factor_first() -> None:
    about_x = quat_from_rotvec([math.pi / 2, 0, 0])
    about_z = quat_from_rotvec([0, 0, math.pi / 2])
    # about x then about z: y -> z -> z
    both = quat_multiply(about_z, about_x)
    np.testing.assert_allclose(quat_to_matrix(both) @ [0, 1, 0], [0, 0, 1], atol=1e-15)
    np.testing.assert_allclose(
        quat_to_matrix(both), quat_to_matrix(about_z) @ quat_to_matrix(about_x), atol=1e-15
    )


def test_mujoco_order_is_converted_both_ways() -> None:
    q_xyzw = np.array([0.1, 0.2, 0.3, 0.9])
    np.testing.assert_array_equal(quat_wxyz_from_xyzw(q_xyzw), [0.9, 0.1, 0.2, 0.3])
    np.testing.assert_array_equal(quat_xyzw_from_wxyz(quat_wxyz_from_xyzw(q_xyzw)), q_xyzw)


@settings(max_examples=200, deadline=None)
@given(unit_quats, unit_quats)
def test_product_matches_mujoco(a: np.ndarray, b: np.ndarray) -> None:
    out = np.zeros(4)
    mujoco.mju_mulQuat(out, quat_wxyz_from_xyzw(a), quat_wxyz_from_xyzw(b))
    np.testing.assert_allclose(quat_multiply(a, b), quat_xyzw_from_wxyz(out), atol=1e-15)


@settings(max_examples=200, deadline=None)
@given(unit_quats)
def test_matrix_round_trip_and_mujoco_agree(q: np.ndarray) -> None:
    m = quat_to_matrix(q)
    np.testing.assert_allclose(m @ m.T, np.eye(3), atol=1e-12)
    assert np.linalg.det(m) == pytest.approx(1.0)
    mj = np.zeros(9)
    mujoco.mju_quat2Mat(mj, quat_wxyz_from_xyzw(q))
    np.testing.assert_allclose(m, mj.reshape(3, 3), atol=1e-12)
    back = quat_from_matrix(m)
    assert back[3] >= 0
    assert same_rotation(back, q)
    np.testing.assert_allclose(quat_z_axis(q), m[:, 2], atol=1e-12)
    np.testing.assert_array_equal(quat_z_axis(q), quat_z_axis_floats(tuple(q.tolist())))


@settings(max_examples=200, deadline=None)
@given(rotvecs)
def test_rotvec_round_trip(r: np.ndarray) -> None:
    q = quat_from_rotvec(r)
    assert np.linalg.norm(q) == pytest.approx(1.0)
    np.testing.assert_allclose(quat_to_rotvec(q), r, atol=1e-12)
    np.testing.assert_allclose(quat_to_rotvec(-q), r, atol=1e-12)  # q and -q: one rotation


@settings(max_examples=200, deadline=None)
@given(unit_quats, rotvecs)
def test_rotvec_between_recovers_a_base_frame_delta(q: np.ndarray, r: np.ndarray) -> None:
    moved = quat_multiply(quat_from_rotvec(r), q)
    np.testing.assert_allclose(rotvec_between(q, moved), r, atol=1e-9)
    assert quat_angle_rad(q, moved) == pytest.approx(np.linalg.norm(r), abs=1e-6)
    assert same_rotation(quat_multiply(quat_conjugate(q), q), np.array([0.0, 0.0, 0.0, 1.0]))


def test_zero_quaternion_has_no_matrix() -> None:
    with pytest.raises(ValueError, match="no direction"):
        quat_to_matrix(np.zeros(4))
