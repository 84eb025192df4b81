"""The ten tabletop tasks: registry, layouts, success checks and the scripted expert."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from robot_server.robots.sim import SimRobot
from robot_server.sim import scene
from robot_server.sim.expert import MAX_STEP_M, MAX_STEP_RAD
from robot_server.sim.fr3 import HOME_Q_RAD
from robot_server.sim.rollout import run_expert_episode
from robot_server.sim.tasks import CANONICAL_PROMPTS, TASK_NAMES, load
from robot_server.sim.tasks.tabletop import LAYOUT_PROPS, body_pos, destination_centre_xy_m, drawer_opening_m
from robot_server.sim.world import SimWorld
from supervisor.proposers import RolloutOutcome

PAPER_PROMPTS = [
    "put the green container in the bowl",
    "put the tape on the top rack",
    "put the bowl on the top rack",
    "put the green container in front of the camera",
    "put the bowl in front of the camera",
    "open the top drawer and put the bowl inside",
    "open the bottom drawer and put the bowl inside",
    "open the top drawer and put the tape inside",
    "open the top drawer and put the green container inside",
    "put the green container on the bottom rack",
]
# Seeds the expert was not tuned on (tuning used 0..19).
TEST_SEEDS = (101, 202)


@pytest.fixture(scope="module")
def robot() -> Iterator[SimRobot]:
    world = SimWorld()
    r = SimRobot(world)
    r.connect()
    yield r
    world.close()


def test_registry_has_the_papers_ten_tasks_in_order() -> None:
    assert [CANONICAL_PROMPTS[n] for n in TASK_NAMES] == PAPER_PROMPTS
    for name in TASK_NAMES:
        task = load(name)
        assert (task.name, task.prompt) == (name, CANONICAL_PROMPTS[name])


def test_unknown_task_lists_the_valid_names() -> None:
    with pytest.raises(ValueError, match="unknown task 'fly'") as info:
        load("fly")
    for name in TASK_NAMES:
        assert name in str(info.value)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_untouched_scene_fails_the_check(robot: SimRobot, task: str) -> None:
    robot.home(task=task, seed=3)
    assert robot.task_success() is False
    for _ in range(10):  # a second of physics: nothing drifts into the goal
        robot.step_idle(0.1)
    assert robot.task_success() is False


def test_layout_is_seeded(robot: SimRobot) -> None:
    def layout(seed: int) -> np.ndarray:
        robot.home(task=TASK_NAMES[0], seed=seed)
        return np.concatenate([body_pos(robot.world, p) for p in LAYOUT_PROPS])

    a, b, c = layout(11), layout(11), layout(12)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 0.01


def test_layout_depends_on_the_seed_not_the_task(robot: SimRobot) -> None:
    """Another task's success check watches the same scene (premise 2 judges the target's canonical
    prompt by the similar task's check: bench/bench_premise_calibrate.py --before-arms)."""

    def layout(task: str) -> np.ndarray:
        robot.home(task=task, seed=7000)
        return np.concatenate([body_pos(robot.world, p) for p in (*LAYOUT_PROPS, "small_object")])

    first = layout(TASK_NAMES[0])
    for task in TASK_NAMES[1:]:
        np.testing.assert_array_equal(layout(task), first, err_msg=task)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_fifty_resets_in_a_row(robot: SimRobot, task: str) -> None:
    w = robot.world
    for seed in range(50):
        robot.home(task=task, seed=seed)
        assert np.all(np.isfinite(w.data.qpos)) and np.all(np.isfinite(w.data.qvel))
        # objects at rest on the table inside the layout box, drawers shut, hand open
        for prop in LAYOUT_PROPS:
            p = body_pos(w, prop)
            assert scene.LAYOUT_X_M[0] <= p[0] <= scene.LAYOUT_X_M[1], (seed, prop, p)
            assert scene.LAYOUT_Y_M[0] <= p[1] <= scene.LAYOUT_Y_M[1], (seed, prop, p)
            assert abs(p[2] - scene.PROPS[prop].rest_z_m) < 2e-3, (seed, prop, p)
        assert np.abs(w.data.qvel).max() < 0.05
        assert drawer_opening_m(w, "top") == pytest.approx(0, abs=1e-3)
        assert drawer_opening_m(w, "bottom") == pytest.approx(0, abs=1e-3)
        assert robot.read_state().gripper_width_m == pytest.approx(0.08, abs=1e-3)


@pytest.mark.parametrize("task", TASK_NAMES)
def test_expert_solves_the_task(robot: SimRobot, task: str) -> None:
    """A fixed-seed sample of the success-rate table (the full 20-seed table is
    bench/bench_record_demos.py); the same seed always gives the same episode."""
    for seed in TEST_SEEDS:
        robot.home(task=task, seed=seed)
        assert robot.task_success() is False
        ep = run_expert_episode(robot, task, seed)
        assert ep.success, f"{task} seed {seed}: the expert failed"
        assert robot.task_success() is True
        actions = np.concatenate([c.actions for c in ep.chunks])
        assert np.linalg.norm(actions[:, :3], axis=1).max() <= MAX_STEP_M + 1e-6
        assert np.linalg.norm(actions[:, 3:6], axis=1).max() <= MAX_STEP_RAD + 1e-6
        assert actions[:, 6].min() >= 0.0 and actions[:, 6].max() <= 0.08
        assert ep.rollout_prompt == ep.canonical_prompt == CANONICAL_PROMPTS[task]


def test_same_seed_same_episode(robot: SimRobot) -> None:
    task = "put_green_container_in_bowl"
    a = run_expert_episode(robot, task, 7)
    qpos_a = robot.world.data.qpos.copy()
    b = run_expert_episode(robot, task, 7)
    np.testing.assert_array_equal(robot.world.data.qpos, qpos_a)
    assert len(a.chunks) == len(b.chunks)
    for ca, cb in zip(a.chunks, b.chunks, strict=True):
        np.testing.assert_array_equal(ca.actions, cb.actions)
        np.testing.assert_array_equal(
            ca.observation.state.joint_positions_rad, cb.observation.state.joint_positions_rad
        )
    c = run_expert_episode(robot, task, 8, max_chunks=1)
    assert not np.array_equal(a.chunks[0].actions, c.chunks[0].actions)


def test_layout_spread_narrows_the_scatter_around_the_nominal_layout() -> None:
    from robot_server.sim.tasks.tabletop import random_layout

    nominal = random_layout(np.random.default_rng(0), 1.0)
    assert random_layout(np.random.default_rng(0), 1.0).keys() == nominal.keys()
    box = np.array([scene.LAYOUT_X_M[1] - scene.LAYOUT_X_M[0], scene.LAYOUT_Y_M[1] - scene.LAYOUT_Y_M[0]])
    wide, narrow = [], []
    for seed in range(30):
        for name, (pos, yaw) in random_layout(np.random.default_rng(seed), 0.0).items():
            assert np.allclose(pos, nominal[name][0]) and yaw == pytest.approx(nominal[name][1])
        for name, (pos, yaw) in random_layout(np.random.default_rng(seed), 0.2).items():
            off = np.abs(pos[:2] - nominal[name][0][:2])
            assert np.all(off <= 0.2 * box + 1e-9), (name, off)
            assert abs(yaw - nominal[name][1]) <= 0.2 * np.pi + 1e-9
            narrow.append(off)
        for name, (pos, _) in random_layout(np.random.default_rng(seed), 1.0).items():
            wide.append(np.abs(pos[:2] - nominal[name][0][:2]))
    assert np.mean(narrow) < 0.4 * np.mean(wide)
    with pytest.raises(ValueError, match="outside"):
        random_layout(np.random.default_rng(0), 1.5)


def test_server_setting_reaches_the_world() -> None:
    from robot_server.backends import build_backend
    from robot_server.settings import RobotServerSettings

    backend = build_backend(
        RobotServerSettings(backend="sim", sim_layout_spread=0.25, image_width=32, image_height=32)
    )
    try:
        assert backend.robot.world.config.layout_spread == 0.25  # type: ignore[attr-defined]
    finally:
        backend.close()


def test_sim_reports_the_held_object_and_the_stand_in_reads_it(robot: SimRobot) -> None:
    """object_held comes from finger contact with an object (the gripper neither shut nor wide
    open): the expert's episode reads as a grasp let go inside the camera region."""
    task = "put_green_container_in_front_of_camera"
    ep = run_expert_episode(robot, task, TEST_SEEDS[0])
    held = [c.observation.state.object_held for c in ep.chunks]
    assert held[0] is False and any(held) and held[-1] is False
    o = RolloutOutcome.from_episode(ep, destination_centre_xy_m("camera"))
    assert ep.success and o.grasped and not o.held_at_end
    assert o.release_to_goal_m is not None and o.release_to_goal_m < 0.07 and o.failure(0.07) == "none"


def test_a_paper_task_with_the_labs_reset_pose_starts_there(robot: SimRobot) -> None:
    pose = (0.0, -0.6, 0.0, -2.3, 0.0, 1.7, 0.785)  # a tasks file's reset_joints_rad
    robot.home(task="put_bowl_on_top_rack", seed=1, joints_rad=pose)
    np.testing.assert_allclose(robot.read_state().joint_positions_rad, pose, atol=0.02)
    robot.home(task="put_bowl_on_top_rack", seed=1)
    np.testing.assert_allclose(robot.read_state().joint_positions_rad, HOME_Q_RAD, atol=0.02)
