"""A scripted person's hand on the simulated arm in guiding mode (the sim's kinesthetic teaching).

``SimRobot.set_guiding(True)`` makes the arm limp with its weight compensated; a ``ScriptedHand``
set as ``SimRobot.guiding_hand`` then pushes it every physics step: a spring-damper on the hand
body pulls the TCP along ``path_m`` (offsets from where the hand first grabbed, base frame) at
``speed_m_s`` and holds the orientation it grabbed at. The hand grabs anew whenever a pause in its
calls (guiding ended and began again, a reset) shows a new take.
"""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np

from pde_contract.rotations import rotvec_between
from robot_server.sim.ik import quat_xyzw_of_mujoco_matrix
from robot_server.sim.world import SimWorld


class ScriptedHand:
    def __init__(
        self,
        path_m: Sequence[Sequence[float]],
        speed_m_s: float = 0.05,
        stiffness_n_m: float = 400.0,
        damping_n_s_m: float = 60.0,
        rot_stiffness_nm_rad: float = 20.0,
        rot_damping_nm_s_rad: float = 2.0,
    ) -> None:
        pts = np.asarray(path_m, dtype=np.float64).reshape(-1, 3)
        self._points = np.vstack([np.zeros(3), pts])  # from the grab point
        self._lengths = np.linalg.norm(np.diff(self._points, axis=0), axis=1)
        self.speed_m_s = speed_m_s
        self.k, self.c = stiffness_n_m, damping_n_s_m
        self.k_rot, self.c_rot = rot_stiffness_nm_rad, rot_damping_nm_s_rad
        self._last_time_s: float | None = None
        self._grab: tuple[float, np.ndarray, np.ndarray] | None = None  # time, position, quat xyzw
        self._vel = np.zeros(6)

    def goal_offset_m(self, elapsed_s: float) -> np.ndarray:
        """Where along the path the hand wants the TCP ``elapsed_s`` after grabbing."""
        s = self.speed_m_s * max(0.0, elapsed_s)
        for start, length, end in zip(self._points, self._lengths, self._points[1:], strict=False):
            if s <= length and length > 0:
                return np.asarray(start + (end - start) * (s / length))
            s -= length
        return np.asarray(self._points[-1])

    def __call__(self, world: SimWorld) -> None:
        """Push for the next physics step (the caller holds the world's lock)."""
        m, d = world.model, world.data
        t = float(d.time)
        pos, mat = world.tcp_pose()
        quat = quat_xyzw_of_mujoco_matrix(mat)
        if self._last_time_s is None or not 0 <= t - self._last_time_s <= 2.5 * world.timestep_s:
            self._grab = (t, pos, quat)
        self._last_time_s = t
        assert self._grab is not None
        t0, start, quat0 = self._grab
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, world.tcp_site_id, self._vel, 0)
        ang_vel, lin_vel = self._vel[:3], self._vel[3:]
        force = self.k * (start + self.goal_offset_m(t - t0) - pos) - self.c * lin_vel
        torque = self.k_rot * rotvec_between(quat, quat0) - self.c_rot * ang_vel
        body = m.site_bodyid[world.tcp_site_id]
        d.xfrc_applied[body, :3] = force
        d.xfrc_applied[body, 3:] = torque
