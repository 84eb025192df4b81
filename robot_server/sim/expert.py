"""Scripted expert: solves every tabletop task from simulator state and emits ``ee_delta`` rows
(pde_contract ActionSpace.EE_DELTA: [dx, dy, dz, drx, dry, drz, gripper_width_m], each applied to
the previous commanded target), at most ``max_step_m`` of translation per row.

A script is a generator of absolute targets (position, yaw about z of the pointing-down hand,
gripper width). It reads only the poses of objects it has not touched yet and predicts the rest
(where a grasped object sits in the hand, how far a pulled drawer opened), so the rows of a chunk
never depend on steps that have not executed yet: chunks can be planned ahead like a policy's.
Each episode draws its own speed, approach height, grasp offsets and pauses from the seed, so
demonstrations of one task are not identical.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from pde_contract.rotations import quat_from_rotvec, quat_multiply
from robot_server.sim import fr3, scene
from robot_server.sim.tasks.tabletop import TabletopTask, body_pos, body_yaw
from robot_server.sim.world import SimWorld

CONTROL_RATE_HZ = 10.0
MAX_STEP_M = 0.02  # per row at 10 Hz: 0.2 m/s, what the server's safety layer allows
MAX_STEP_RAD = 0.15


@dataclass(frozen=True)
class Waypoint:
    pos: np.ndarray  # TCP, base frame
    yaw: float  # rotation about base z applied to the home (pointing-down) orientation
    width: float  # gripper opening, m


@dataclass(frozen=True)
class Style:
    """One episode's variation."""

    speed_m_s: float
    slow_speed_m_s: float
    approach_height_m: float
    carry_height_m: float
    grasp_offset_m: np.ndarray  # xy offset of the grasp point along the object
    pause_steps: int
    release_lift_m: float

    @staticmethod
    def sample(rng: np.random.Generator) -> Style:
        return Style(
            speed_m_s=float(rng.uniform(0.12, 0.19)),
            slow_speed_m_s=float(rng.uniform(0.05, 0.08)),
            approach_height_m=float(rng.uniform(0.08, 0.13)),
            carry_height_m=float(rng.uniform(0.05, 0.1)),
            grasp_offset_m=rng.uniform(-0.004, 0.004, 2),
            pause_steps=int(rng.integers(1, 4)),
            release_lift_m=float(rng.uniform(0.08, 0.14)),
        )


def _v(*xyz: float) -> np.ndarray:
    return np.array(xyz, dtype=np.float64)


def wrap_half_turn(yaw: float) -> float:
    """The equivalent hand yaw in [-pi/2, pi/2) (the parallel gripper is symmetric under pi)."""
    return (yaw + math.pi / 2) % math.pi - math.pi / 2


class Expert:
    def __init__(
        self,
        world: SimWorld,
        task: TabletopTask,
        rng: np.random.Generator,
        start_pos: np.ndarray,
        start_quat_xyzw: np.ndarray,
        max_step_m: float = MAX_STEP_M,
    ) -> None:
        self.world = world
        self.task = task
        self.rng = rng
        self.style = Style.sample(rng)
        self.max_step_m = max_step_m
        self.dt = 1.0 / CONTROL_RATE_HZ
        self._home_quat_xyzw = np.asarray(start_quat_xyzw, dtype=np.float64)
        self._cmd = Waypoint(np.asarray(start_pos, dtype=np.float64).copy(), 0.0, fr3.GRIPPER_MAX_WIDTH_M)
        self._held_offset = np.zeros(3)  # object origin minus TCP while held
        self._drawer_opening_m = 0.0
        self._rows = self._script()
        self.done = False

    # --- public -------------------------------------------------------------------------------------

    def next_chunk(self, n_rows: int) -> np.ndarray:
        """The next ``n_rows`` ee_delta rows (zero motion once the script has finished)."""
        rows = []
        for _ in range(n_rows):
            row = next(self._rows, None)
            if row is None:
                self.done = True
                row = np.array([0, 0, 0, 0, 0, 0, self._cmd.width])
            rows.append(row)
        return np.asarray(rows, dtype=np.float64)

    def quat_xyzw(self, yaw: float) -> np.ndarray:
        return quat_multiply(quat_from_rotvec(np.array([0.0, 0.0, yaw])), self._home_quat_xyzw)

    # --- motion primitives ------------------------------------------------------------------------------

    def _emit(self, wp: Waypoint) -> np.ndarray:
        # Rz(yaw2) R_home (Rz(yaw1) R_home)^-1 = Rz(yaw2 - yaw1): the base-frame rotation is about z
        row = np.concatenate([wp.pos - self._cmd.pos, [0.0, 0.0, wp.yaw - self._cmd.yaw], [wp.width]])
        self._cmd = wp
        return row

    def move(
        self,
        pos: np.ndarray,
        yaw: float | None = None,
        width: float | None = None,
        speed_m_s: float | None = None,
    ) -> Iterator[np.ndarray]:
        """Smooth (cubic ease) motion to ``pos``/``yaw``; no row moves more than max_step_m."""
        start = self._cmd
        yaw = start.yaw if yaw is None else yaw
        width = start.width if width is None else width
        step = min(self.max_step_m, (speed_m_s or self.style.speed_m_s) * self.dt)
        dist = float(np.linalg.norm(pos - start.pos))
        # the ease peaks at 1.5x the mean speed: size the step count on that
        n = max(1, math.ceil(1.5 * dist / step), math.ceil(1.5 * abs(yaw - start.yaw) / MAX_STEP_RAD))
        for k in range(1, n + 1):
            s = k / n
            a = s * s * (3 - 2 * s)
            yield self._emit(
                Waypoint(start.pos + a * (pos - start.pos), start.yaw + a * (yaw - start.yaw), width)
            )

    def grip(self, width: float, steps: int) -> Iterator[np.ndarray]:
        for _ in range(steps):
            yield self._emit(Waypoint(self._cmd.pos, self._cmd.yaw, width))

    def pause(self, steps: int | None = None) -> Iterator[np.ndarray]:
        return self.grip(self._cmd.width, self.style.pause_steps if steps is None else steps)

    # --- scripts ------------------------------------------------------------------------------------------

    def _script(self) -> Iterator[np.ndarray]:
        if self.task.drawer is not None:
            yield from self.open_drawer(self.task.drawer)
        yield from self.pick(self.task.prop)
        yield from self.place(self.task.prop, self.task.destination)

    def open_drawer(self, level: str) -> Iterator[np.ndarray]:
        st = self.style
        with self.world.lock:
            handle = self.world.data.geom_xpos[self.world.model.geom(f"{level}_drawer_handle").id].copy()
        handle[:2] += st.grasp_offset_m * [0.25, 0.5]
        above = handle + _v(0, 0, st.approach_height_m)
        # fingers across y straddle the vertical bar: hand yaw 0
        yield from self.move(above, 0.0, 0.045)
        yield from self.move(handle, speed_m_s=st.slow_speed_m_s)
        yield from self.grip(0.0, 4)
        self._drawer_opening_m = scene.DRAWER_TRAVEL_M - 0.01
        pull = handle - _v(self._drawer_opening_m, 0, 0)
        yield from self.move(pull, speed_m_s=st.slow_speed_m_s + 0.02)
        yield from self.grip(0.045, 3)
        yield from self.move(pull + _v(-0.02, 0, st.approach_height_m))

    def _grasp_pose(self, prop: str) -> tuple[np.ndarray, float, float]:
        """(TCP position, hand yaw, pre-grasp width) for picking ``prop``."""
        with self.world.lock:
            p = body_pos(self.world, prop)
            yaw = body_yaw(self.world, prop)
        st = self.style
        if prop == "green_container":
            # close across the 4.5 cm side (the body's y): hand yaw = body yaw (mod pi)
            offset = np.array([math.cos(yaw), math.sin(yaw)]) * st.grasp_offset_m[0]
            return np.array([p[0] + offset[0], p[1] + offset[1], p[2] + 0.002]), wrap_half_turn(yaw), 0.075
        if prop == "tape":
            hand_yaw = wrap_half_turn(float(self.rng.uniform(-0.5, 0.5)))
            return np.array([p[0], p[1], p[2] + 0.004]), hand_yaw, 0.08
        if prop == "bowl":
            # pinch the wall box facing the robot base: 16 walls at the body's yaw + k * 22.5 deg
            toward_base = math.atan2(-p[1], -p[0])
            k = round((toward_base - yaw) / (2 * math.pi / 16))
            wall = yaw + k * 2 * math.pi / 16
            rim = p[:2] + 0.06 * np.array([math.cos(wall), math.sin(wall)])
            return np.array([rim[0], rim[1], p[2] + 0.036]), wrap_half_turn(wall + math.pi / 2), 0.036
        raise ValueError(f"the expert cannot pick {prop!r}")

    def pick(self, prop: str) -> Iterator[np.ndarray]:
        st = self.style
        grasp, yaw, width = self._grasp_pose(prop)
        with self.world.lock:
            self._held_offset = body_pos(self.world, prop) - grasp
        above = grasp + _v(0, 0, st.approach_height_m)
        # travel level first (an open drawer may lie between the hand and the object), then down
        travel_z = max(self._cmd.pos[2], above[2] + 0.02)
        yield from self.move(_v(above[0], above[1], travel_z), yaw, width)
        yield from self.move(above)
        yield from self.move(grasp, speed_m_s=st.slow_speed_m_s)
        yield from self.pause(1)
        yield from self.grip(0.0, 5)
        lift_to = grasp + _v(0, 0, st.approach_height_m)
        yield from self.move(lift_to, speed_m_s=st.slow_speed_m_s + 0.03)

    def _destination_point(self, prop: str, destination: str) -> np.ndarray:
        """Where the object's body origin should rest."""
        rest = scene.PROPS[prop].rest_z_m
        if destination == "bowl":
            with self.world.lock:
                b = body_pos(self.world, "bowl")
            return np.array([b[0], b[1], b[2] + 0.008 + rest])
        if destination in ("top_rack", "bottom_rack"):
            shelf = scene.RACK_SHELVES[destination.split("_")[0]]
            (x0, x1), top_z = shelf.x_m, shelf.top_z_m
            jitter = self.rng.uniform(-0.015, 0.015, 2)
            return np.array([(x0 + x1) / 2 + jitter[0] * 0.5, scene.RACK_Y_M + jitter[1] * 2, top_z + rest])
        if destination == "camera":
            (x0, x1), (y0, y1) = scene.CAMERA_REGION_X_M, scene.CAMERA_REGION_Y_M
            jitter = self.rng.uniform(-0.02, 0.02, 2)
            return np.array([(x0 + x1) / 2 + jitter[0], (y0 + y1) / 2 + jitter[1], rest])
        if destination in ("top_drawer", "bottom_drawer"):
            level = destination.split("_")[0]
            opening = self._drawer_opening_m
            closed_x = scene.CABINET_FRONT_X_M + 0.008 + scene.DRAWER_INNER_HALF_X_M
            d = np.array([closed_x - opening, scene.CABINET_Y_M, scene.DRAWER_FLOOR_Z[level]])
            # the part of the drawer outside the cabinet: from its inner front wall to the cabinet front
            x_front = d[0] - scene.DRAWER_INNER_HALF_X_M
            x_exposed_end = min(scene.CABINET_FRONT_X_M, x_front + opening)
            x = (x_front + x_exposed_end) / 2 + float(self.rng.uniform(-0.005, 0.005))
            # keep clear of the other drawer's handle (top: +y) while lowering into the bottom one
            y = d[1] + (-0.02 if level == "bottom" else 0.0) + float(self.rng.uniform(-0.012, 0.012))
            return np.array([x, y, d[2] + rest])
        raise ValueError(f"the expert cannot place at {destination!r}")

    def place(self, prop: str, destination: str) -> Iterator[np.ndarray]:
        st = self.style
        goal = self._destination_point(prop, destination)
        tcp_goal = goal - self._held_offset + _v(0, 0, 0.012)
        surface_clearance = 0.1 if destination != "top_rack" else 0.22
        carry_z = max(self._cmd.pos[2], tcp_goal[2] + surface_clearance)
        if destination.endswith("_drawer"):
            # the held object's bottom must clear the cabinet top on the way over
            bottom_below_tcp = scene.PROPS[prop].rest_z_m - self._held_offset[2]
            carry_z = max(carry_z, scene.CABINET_TOP_Z_M + 0.03 + bottom_below_tcp)
        carry_z += st.carry_height_m
        yield from self.move(np.array([self._cmd.pos[0], self._cmd.pos[1], carry_z]))
        yield from self.move(np.array([tcp_goal[0], tcp_goal[1], carry_z]))
        yield from self.move(tcp_goal + _v(0, 0, 0.04))
        yield from self.move(tcp_goal, speed_m_s=st.slow_speed_m_s)
        release_width = 0.08 if prop != "bowl" else 0.04
        yield from self.grip(release_width, 4)
        yield from self.move(tcp_goal + _v(0, 0, st.release_lift_m), speed_m_s=st.slow_speed_m_s + 0.04)
        yield from self.pause()


def apply_ee_delta(
    pos: np.ndarray, quat_xyzw: np.ndarray, row: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """The commanded target after one ee_delta row: position + d, rotation exp(drot) * R (base frame)."""
    new_pos = pos + row[:3]
    new_quat = quat_multiply(quat_from_rotvec(row[3:6]), quat_xyzw)
    return new_pos, new_quat / np.linalg.norm(new_quat), float(row[6])
