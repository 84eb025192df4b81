"""The simulated FR3 (SimWorld + SimRobot + SimCamera) on the bare table."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import cv2
import numpy as np
import pytest

from pde_contract.rotations import quat_from_rotvec, quat_multiply, rotvec_between
from robot_server.cameras.base import CameraError
from robot_server.cameras.sim import SimCamera
from robot_server.robots.base import RobotError, RobotNotConnectedError, RobotTarget
from robot_server.robots.sim import SimRobot
from robot_server.sim import fr3
from robot_server.sim.profile import SIM_PROFILES, load_profile
from robot_server.sim.world import SimWorld, SimWorldConfig

PERIOD_S = 0.1
CUBE = (
    '<body name="cube" pos="0.5 0.1 0.025"><freejoint/>'
    '<geom name="cube" type="box" size="0.025 0.025 0.025" mass="0.3" rgba="0.8 0.2 0.2 1"/></body>'
)


# The sim speed profiles (robot_server/sim/profile.py) the arm's limits, tracking and grasps are
# checked under: tests marked with BOTH_PROFILES run once per profile, the rest on the default.
BOTH_PROFILES = pytest.mark.parametrize("world", sorted(SIM_PROFILES), indirect=True)


@pytest.fixture(scope="module")
def world(request: pytest.FixtureRequest) -> Iterator[SimWorld]:
    profile = load_profile(getattr(request, "param", "default"))
    w = SimWorld(SimWorldConfig(scene="table", extra_worldbody_xml=(CUBE,), profile=profile))
    yield w
    w.close()


@pytest.fixture
def robot(world: SimWorld) -> SimRobot:
    r = SimRobot(world)
    r.connect()
    r.home(seed=0)
    return r


def _v(*xyz: float) -> np.ndarray:
    return np.array(xyz, dtype=np.float64)


def _target(pos: np.ndarray, quat_xyzw: np.ndarray, width: float = 0.08) -> RobotTarget:
    return RobotTarget(gripper_width_m=width, ee_position_m=pos, ee_quat_xyzw=quat_xyzw)


def test_state_shapes_and_home_pose(robot: SimRobot) -> None:
    s = robot.read_state()
    assert s.joint_positions_rad.shape == (7,) and s.joint_velocities_rad_s.shape == (7,)
    assert s.ee_position_m.shape == (3,) and s.ee_quat_xyzw.shape == (4,)
    np.testing.assert_allclose(s.joint_positions_rad, fr3.HOME_Q_RAD, atol=2e-3)
    # Home: TCP ~0.31 m in front of the base, ~0.49 m up, pointing down.
    np.testing.assert_allclose(s.ee_position_m, [0.307, 0.0, 0.487], atol=5e-3)
    z_axis = robot.world.tcp_pose()[1][:, 2]
    assert z_axis[2] < -0.999
    assert s.gripper_width_m == pytest.approx(0.08, abs=1e-3)
    assert s.robot_time_s > 0


@BOTH_PROFILES
def test_steps_stay_finite_and_within_limits(robot: SimRobot) -> None:
    rng = np.random.default_rng(1)
    pos, quat = robot.home_pose
    for _ in range(30):
        pos = np.clip(pos + rng.uniform(-0.02, 0.02, 3), [0.3, -0.3, 0.1], [0.6, 0.3, 0.5])
        robot.command(_target(pos, quat, float(rng.uniform(0, 0.08))), PERIOD_S)
        s = robot.read_state()
        for arr in (s.joint_positions_rad, s.joint_velocities_rad_s, s.ee_position_m, s.ee_quat_xyzw):
            assert np.all(np.isfinite(arr))
        assert np.all(s.joint_positions_rad >= fr3.JOINT_LOWER_RAD - 1e-2)
        assert np.all(s.joint_positions_rad <= fr3.JOINT_UPPER_RAD + 1e-2)


@BOTH_PROFILES
def test_ik_tracks_a_moving_target(robot: SimRobot) -> None:
    """Tolerance: a circle of radius 0.1 m at ~0.2 m/s with a 0.4 rad yaw sweep; measured at the end
    of each 0.1 s period the TCP is within 3 mm (mean) / 6 mm (max) and 1 degree of the target."""
    pos0, quat0 = robot.home_pose
    centre = pos0 + np.array([0.15, 0.0, -0.2])
    # approach the circle's start slowly
    start = centre + np.array([0.1, 0.0, 0.0])
    for a in np.linspace(0, 1, 15):
        robot.command(_target(pos0 + a * (start - pos0), quat0), PERIOD_S)
    pos_err, rot_err = [], []
    for k in range(1, 32):
        phi = 2 * np.pi * k / 31
        pos = centre + 0.1 * np.array([np.cos(phi), np.sin(phi), 0.0])
        quat = quat_multiply(quat_from_rotvec(np.array([0, 0, 0.4 * np.sin(phi)])), quat0)
        robot.command(_target(pos, quat), PERIOD_S)
        s = robot.read_state()
        pos_err.append(np.linalg.norm(s.ee_position_m - pos))
        rot_err.append(np.linalg.norm(rotvec_between(s.ee_quat_xyzw, quat)))
    assert np.mean(pos_err) < 3e-3, pos_err
    assert np.max(pos_err) < 6e-3, pos_err
    assert np.degrees(np.max(rot_err)) < 1.0, rot_err


def test_joint_targets_are_reached(robot: SimRobot) -> None:
    goal = fr3.HOME_Q_RAD + np.array([0.2, 0.1, -0.1, 0.2, 0.1, -0.1, 0.3])
    for a in np.linspace(0.1, 1.0, 10):
        q = fr3.HOME_Q_RAD + a * (goal - fr3.HOME_Q_RAD)
        robot.command(RobotTarget(gripper_width_m=0.04, joint_positions_rad=q), PERIOD_S)
    for _ in range(5):
        robot.command(RobotTarget(gripper_width_m=0.04, joint_positions_rad=goal), PERIOD_S)
    s = robot.read_state()
    np.testing.assert_allclose(s.joint_positions_rad, goal, atol=5e-3)
    assert s.gripper_width_m == pytest.approx(0.04, abs=2e-3)


@BOTH_PROFILES
def test_joint_targets_beyond_limits_are_clipped(robot: SimRobot) -> None:
    goal = fr3.JOINT_UPPER_RAD + 1.0
    for _ in range(30):
        robot.command(RobotTarget(gripper_width_m=0.08, joint_positions_rad=goal), PERIOD_S)
    q = robot.read_state().joint_positions_rad
    assert np.all(q <= fr3.JOINT_UPPER_RAD + 1e-2)


@BOTH_PROFILES
def test_gripper_lifts_a_cube(robot: SimRobot, world: SimWorld) -> None:
    _, quat = robot.home_pose
    cube_id = world.model.body("cube").id
    cube = world.data.xpos[cube_id].copy()
    waypoints = [(cube + _v(0, 0, 0.15), 0.08), (cube + _v(0, 0, 0.0), 0.08)]
    pos = robot.read_state().ee_position_m
    for goal, width in waypoints:
        n = int(np.ceil(np.linalg.norm(goal - pos) / 0.015))
        for a in np.linspace(1 / n, 1, n):
            robot.command(_target(pos + a * (goal - pos), quat, width), PERIOD_S)
        pos = goal
    for _ in range(8):
        robot.command(_target(pos, quat, 0.0), PERIOD_S)
    assert robot.read_state().gripper_width_m == pytest.approx(0.05, abs=3e-3)  # squeezing the cube
    lift = pos + _v(0, 0, 0.2)
    for a in np.linspace(0.05, 1, 20):
        robot.command(_target(pos + a * (lift - pos), quat, 0.0), PERIOD_S)
    for _ in range(10):  # hold it up for a second
        robot.command(_target(lift, quat, 0.0), PERIOD_S)
    tcp = robot.read_state().ee_position_m
    assert world.data.xpos[cube_id][2] > 0.2
    assert np.linalg.norm(world.data.xpos[cube_id] - tcp) < 0.01  # no slip out of the fingers


def test_same_seed_same_trajectory(world: SimWorld) -> None:
    def run() -> np.ndarray:
        r = SimRobot(world)
        r.connect()
        r.home(seed=5)
        pos, quat = r.home_pose
        rows = []
        for k in range(20):
            r.command(_target(pos + _v(0.01 * k, 0.005 * k, -0.01 * k), quat, 0.08 - 0.004 * k), PERIOD_S)
            rows.append(world.data.qpos.copy())
        return np.array(rows)

    np.testing.assert_array_equal(run(), run())


def test_many_resets(robot: SimRobot, world: SimWorld) -> None:
    pos, quat = robot.home_pose
    for k in range(50):
        robot.command(_target(pos + _v(0.05, 0.02 * (k % 3), -0.05), quat, 0.0), PERIOD_S)
        robot.home(seed=k)
        s = robot.read_state()
        np.testing.assert_allclose(s.joint_positions_rad, fr3.HOME_Q_RAD, atol=2e-3)
        assert s.gripper_width_m == pytest.approx(0.08, abs=1e-3)
        assert np.all(np.isfinite(world.data.qpos))


@BOTH_PROFILES
def test_hold_keeps_the_pose(robot: SimRobot) -> None:
    pos, quat = robot.home_pose
    for k in range(5):
        robot.command(_target(pos + _v(0.015 * k, 0, 0), quat), PERIOD_S)
    robot.hold()
    held = robot.read_state().joint_positions_rad
    for _ in range(10):
        robot.step_idle(PERIOD_S)
    np.testing.assert_allclose(robot.read_state().joint_positions_rad, held, atol=3e-3)


def test_errors_are_clear(world: SimWorld) -> None:
    r = SimRobot(world)
    with pytest.raises(RobotNotConnectedError, match="connect"):
        r.command(RobotTarget(gripper_width_m=0.08, joint_positions_rad=fr3.HOME_Q_RAD), PERIOD_S)
    r.connect()
    with pytest.raises(RobotError, match="joint_positions_rad or ee_position_m"):
        r.command(RobotTarget(gripper_width_m=0.08), PERIOD_S)
    with pytest.raises(RobotError, match=r"shape \(6,\)"):
        r.command(RobotTarget(gripper_width_m=0.08, joint_positions_rad=np.zeros(6)), PERIOD_S)
    with pytest.raises(ValueError, match="built-in tasks"):
        r.home(task="no_such_task")


def test_camera_frames(world: SimWorld, robot: SimRobot) -> None:
    cams = [SimCamera(world, "external"), SimCamera(world, "wrist")]
    with pytest.raises(CameraError, match="connect"):
        cams[0].read()
    for cam in cams:
        cam.connect()
        f1, f2 = cam.read(), cam.read()
        assert (f1.name, f1.width, f1.height) == (cam.name, 224, 224)
        assert f2.frame_index == f1.frame_index + 1 and f2.capture_time_s >= f1.capture_time_s
        img = cv2.imdecode(np.frombuffer(f1.jpeg, np.uint8), cv2.IMREAD_COLOR)
        assert img.shape == (224, 224, 3)
        assert img.std() > 5  # not a blank frame
        fovy = np.radians(world.model.cam_fovy[world.camera_ids[cam.name]])
        assert cam.intrinsics.fy == pytest.approx(112 / np.tan(fovy / 2))
    with pytest.raises(ValueError, match="unknown sim camera"):
        SimCamera(world, "nope")


def _red_centroid(rgb: np.ndarray) -> np.ndarray:
    r, g, b = (rgb[..., i].astype(int) for i in range(3))
    ys, xs = np.nonzero((r > 120) & (r > 2 * g) & (r > 2 * b))
    assert len(xs) > 20, "the red cube is not in view"
    return np.array([xs.mean(), ys.mean()])


def test_wrist_camera_moves_with_the_hand(world: SimWorld, robot: SimRobot) -> None:
    cam = SimCamera(world, "wrist")
    before = _red_centroid(cam.read_rgb()[0])
    pos, quat = robot.home_pose
    for k in range(1, 6):
        robot.command(_target(pos + _v(0.0, 0.01 * k, -0.01 * k), quat), PERIOD_S)
    after = _red_centroid(cam.read_rgb()[0])
    assert np.linalg.norm(after - before) > 10  # pixels: the cube moved in the wrist view


def test_camera_thread_renders_while_control_steps(world: SimWorld, robot: SimRobot) -> None:
    cams = [SimCamera(world, "external"), SimCamera(world, "wrist")]
    for c in cams:
        c.connect()
    frames: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def camera_loop() -> None:
        try:
            while not stop.is_set():
                frames.extend(len(c.read().jpeg) for c in cams)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=camera_loop)
    t.start()
    pos, quat = robot.home_pose
    try:
        for k in range(30):
            robot.command(_target(pos + _v(0.005 * k, 0, -0.005 * k), quat), PERIOD_S)
    finally:
        stop.set()
        t.join(10)
    assert not errors, errors
    assert len(frames) >= 2 and min(frames) > 1000


def _pushed_tcp_travel_m(robot: SimRobot, push_n: float, ticks: int) -> float:
    """How far the TCP moves while a sideways force acts on the hand for ``ticks`` idle ticks."""
    w = robot.world
    hand = w.model.site_bodyid[w.tcp_site_id]
    start = robot.read_state().ee_position_m
    with w.lock:
        w.data.xfrc_applied[hand, :3] = (0.0, push_n, 0.0)
    try:
        for _ in range(ticks):
            robot.idle(PERIOD_S)
    finally:
        with w.lock:
            w.data.xfrc_applied[hand] = 0.0
    return float(np.linalg.norm(robot.read_state().ee_position_m - start))


def test_guiding_makes_the_arm_compliant_and_holds_its_weight(robot: SimRobot) -> None:
    assert _pushed_tcp_travel_m(robot, 20.0, 5) < 0.01  # the servos hold against a 20 N push
    robot.set_guiding(True)
    q0 = robot.read_state().joint_positions_rad
    for _ in range(5):
        robot.idle(PERIOD_S)
    # no push: gravity is compensated, the arm does not sag
    assert np.abs(robot.read_state().joint_positions_rad - q0).max() < 0.02
    assert _pushed_tcp_travel_m(robot, 20.0, 5) > 0.03  # a hand moves it
    robot.set_guiding(False)
    held = robot.read_state().ee_position_m
    for _ in range(5):
        robot.idle(PERIOD_S)
    # the servos hold where the operator left the arm (no jump back)
    assert np.linalg.norm(robot.read_state().ee_position_m - held) < 0.01


@BOTH_PROFILES
def test_ik_keeps_every_joint_off_its_limits(robot: SimRobot) -> None:
    from robot_server.sim.ik import IK_JOINT_MARGIN_RAD

    q_far = fr3.HOME_Q_RAD.copy()
    q_far[6] = fr3.JOINT_UPPER_RAD[6]  # a pose only reachable with joint 7 at its limit
    pos, quat = robot.ik.forward(q_far)
    q = robot.ik.solve(fr3.HOME_Q_RAD, pos, quat)
    assert np.all(q >= fr3.JOINT_LOWER_RAD + IK_JOINT_MARGIN_RAD - 1e-12)
    assert np.all(q <= fr3.JOINT_UPPER_RAD - IK_JOINT_MARGIN_RAD + 1e-12)
    # a joint already inside the margin may stay there, but never goes further in
    seed = q_far.copy()
    seed[6] -= IK_JOINT_MARGIN_RAD / 2
    q = robot.ik.solve(seed, pos, quat)
    assert q[6] <= seed[6] + 1e-12
