"""SimWorld: the MuJoCo model (FR3 + table + tabletop props + two cameras), its data, and the lock
that lets a camera thread render while the control thread steps.

The model is written as MJCF text in code (fr3.py for the arm, scene.py for the table and props);
the settings come from SIM.md: elliptic cones with impratio 10 for grasps that hold, implicitfast
at 2 ms, shadows and multisampling off because software rendering is dominated by them.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

# MuJoCo picks its GL backend at import: headless machines need EGL (or OSMesa) set first.
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

import mujoco

from robot_server.sim import fr3, scene
from robot_server.sim.profile import DEFAULT, SimProfile

CAMERA_NAMES = ("external", "wrist")
# The external camera faces the robot from across the table, front-right, above the scene.
EXTERNAL_CAMERA_POS_M = (1.05, -0.5, 0.8)
EXTERNAL_CAMERA_TARGET_M = (0.4, 0.02, 0.14)


@dataclass(frozen=True)
class SimWorldConfig:
    image_width: int = 224
    image_height: int = 224
    # Physics step, IK effort and setpoint blocks (robot_server/sim/profile.py): the default
    # everywhere but benchmarks that opt into "fast".
    profile: SimProfile = DEFAULT
    # "tabletop": the paper's fixed scene (props, drawers, rack); "table": the bare table.
    scene: str = "tabletop"
    # MJCF fragments appended to the worldbody (tests and new tasks add bodies here).
    extra_worldbody_xml: tuple[str, ...] = ()
    external_camera_fovy_deg: float = 55.0
    wrist_camera_fovy_deg: float = 75.0
    # Gripper width speed of the simulated hand (the Franka hand does ~0.1 m/s).
    gripper_speed_m_s: float = 0.1
    # How far task resets scatter the objects: 1 = the whole layout box and any yaw (the paper's
    # demonstrations); 0 = always the nominal layout. Benchmarks use less for a narrow start.
    layout_spread: float = 1.0

    def __post_init__(self) -> None:
        if self.image_width < 8 or self.image_height < 8 or max(self.image_width, self.image_height) > 2048:
            raise ValueError(
                f"image size {self.image_width}x{self.image_height} is out of range: use 8..2048 pixels"
            )
        if not 0.0 <= self.layout_spread <= 1.0:
            raise ValueError(f"layout_spread={self.layout_spread} outside 0..1")
        if self.scene not in scene.SCENES:
            raise ValueError(f"unknown scene {self.scene!r}: choose one of {sorted(scene.SCENES)}")


def build_mjcf(config: SimWorldConfig) -> str:
    off_w = max(640, config.image_width)
    off_h = max(480, config.image_height)
    return f"""
<mujoco model="fr3_tabletop">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{config.profile.physics_timestep_s}" integrator="implicitfast" cone="elliptic"
          impratio="10"/>
  <visual>
    <global offwidth="{off_w}" offheight="{off_h}"/>
    <quality offsamples="0" shadowsize="0" numslices="16" numstacks="6" numquads="1"/>
    <headlight ambient="0.45 0.45 0.45" diffuse="0.4 0.4 0.4" specular="0 0 0"/>
  </visual>
  <default>
    <geom solref="0.005 1"/>
    {fr3.defaults_xml()}
    {scene.defaults_xml()}
  </default>
  {scene.assets_xml(config.scene)}
  <worldbody>
    <light name="top" pos="0.4 0 1.6" dir="0 0 -1" diffuse="0.5 0.5 0.5" castshadow="false"/>
    <camera name="external" pos="{_vec(EXTERNAL_CAMERA_POS_M)}"
            xyaxes="{_look_at_xyaxes(EXTERNAL_CAMERA_POS_M, EXTERNAL_CAMERA_TARGET_M)}"
            fovy="{config.external_camera_fovy_deg}"/>
    {fr3.arm_body_xml(config.wrist_camera_fovy_deg)}
    {scene.worldbody_xml(config.scene)}
    {"".join(config.extra_worldbody_xml)}
  </worldbody>
  {scene.contact_xml(config.scene)}
  {fr3.tendon_equality_xml()}
  <actuator>
    {fr3.actuators_xml()}
    {scene.actuators_xml(config.scene)}
  </actuator>
</mujoco>
"""


def _vec(v: tuple[float, ...]) -> str:
    return " ".join(f"{x:.6f}" for x in v)


def _look_at_xyaxes(eye: tuple[float, float, float], target: tuple[float, float, float]) -> str:
    forward = np.asarray(target, float) - np.asarray(eye, float)
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    return _vec((*right, *up))


class SimWorld:
    """Model, data and lock. Hold ``lock`` for any access to ``data``."""

    def __init__(self, config: SimWorldConfig | None = None) -> None:
        self.config = config or SimWorldConfig()
        self.mjcf = build_mjcf(self.config)
        self.model = mujoco.MjModel.from_xml_string(self.mjcf)
        self.data = mujoco.MjData(self.model)
        self.lock = threading.RLock()
        self._renderers: dict[tuple[int, int], mujoco.Renderer] = {}
        self._render_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sim-render")
        self._closed = False
        m = self.model
        self.arm_qpos_adr = np.array([m.jnt_qposadr[m.joint(n).id] for n in fr3.ARM_JOINTS])
        self.arm_dof_adr = np.array([m.jnt_dofadr[m.joint(n).id] for n in fr3.ARM_JOINTS])
        self.finger_qpos_adr = np.array([m.jnt_qposadr[m.joint(n).id] for n in fr3.FINGER_JOINTS])
        self.arm_actuator_ids = np.array([m.actuator(f"{n}_servo").id for n in fr3.ARM_JOINTS])
        self.gripper_actuator_id = m.actuator(fr3.GRIPPER_ACTUATOR).id
        self.tcp_site_id = m.site(fr3.TCP_SITE).id
        self.finger_geom_ids = frozenset(
            g for g in range(m.ngeom) if m.body(m.geom_bodyid[g]).name.startswith("fr3_finger")
        )
        # Geoms of the free objects (scene.PROPS), for "does the hand hold an object"
        self.prop_geom_ids = frozenset(
            g for g in range(m.ngeom) if m.body(m.geom_bodyid[g]).name in scene.PROPS
        )
        self.camera_ids = {name: m.camera(name).id for name in CAMERA_NAMES}
        self._critically_damp_servos_at_home()

    def _critically_damp_servos_at_home(self) -> None:
        # MJCF's dampratio uses the inertia at qpos0 (arm straight up), where joints 1 and 3 see
        # 5-10x less inertia than at home: the servos then ring (damping ratio ~0.4). Set kv from
        # the joint-space inertia at home instead.
        m = self.model
        scratch = mujoco.MjData(m)
        scratch.qpos[self.arm_qpos_adr] = fr3.HOME_Q_RAD
        mujoco.mj_forward(m, scratch)
        inertia = np.zeros((m.nv, m.nv))
        mujoco.mj_fullM(m, scratch, inertia)
        for act, dof in zip(self.arm_actuator_ids, self.arm_dof_adr, strict=True):
            kp = m.actuator_gainprm[act, 0]
            m.actuator_biasprm[act, 2] = -2.0 * np.sqrt(kp * inertia[dof, dof])

    @property
    def timestep_s(self) -> float:
        return float(self.model.opt.timestep)

    # --- rendering ------------------------------------------------------------------------------

    def _renderer(self, width: int, height: int) -> mujoco.Renderer:
        # Runs in the render thread only (see render()).
        renderer = self._renderers.get((width, height))
        if renderer is None:
            renderer = mujoco.Renderer(self.model, height=height, width=width)
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
            self._renderers[(width, height)] = renderer
        return renderer

    def _render_in_thread(self, camera: str, width: int, height: int) -> np.ndarray:
        renderer = self._renderer(width, height)
        with self.lock:
            renderer.update_scene(self.data, camera=camera)
        return renderer.render()

    def render(self, camera: str, width: int | None = None, height: int | None = None) -> np.ndarray:
        """RGB uint8 [H, W, 3] of the current state, from any thread.

        A GL context is current in one thread only (EGL refuses to make it current elsewhere, and
        refuses to free it from elsewhere), so all rendering happens in one worker thread that owns
        the contexts. The world lock covers only the scene update: the control thread waits for a
        copy of the geometry, not for the rasterisation."""
        if camera not in self.camera_ids:
            raise ValueError(f"unknown camera {camera!r}: the world has {list(self.camera_ids)}")
        if self._closed:
            raise RuntimeError("SimWorld is closed: create a new one to render")
        w, h = width or self.config.image_width, height or self.config.image_height
        return self._render_executor.submit(self._render_in_thread, camera, w, h).result()

    def camera_intrinsics(self, camera: str, width: int, height: int) -> tuple[float, float, float, float]:
        """(fx, fy, cx, cy) in pixels of a pinhole camera with the model's vertical field of view."""
        fovy_rad = np.deg2rad(float(self.model.cam_fovy[self.camera_ids[camera]]))
        f = 0.5 * height / np.tan(0.5 * fovy_rad)
        return float(f), float(f), (width - 1) / 2.0, (height - 1) / 2.0

    def close(self) -> None:
        """Free the GL contexts (in the thread that owns them). Idempotent."""
        if self._closed:
            return
        self._closed = True

        def close_all() -> None:
            for r in self._renderers.values():
                r.close()
            self._renderers.clear()

        self._render_executor.submit(close_all).result()
        self._render_executor.shutdown(wait=True)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: nothing left to free
            self.close()

    # --- state helpers ---------------------------------------------------------------------------

    def gripper_width_m(self) -> float:
        return float(self.data.qpos[self.finger_qpos_adr].sum())

    def tcp_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """(position [3], rotation matrix [3, 3]) of the TCP site from the current kinematics."""
        return self.data.site_xpos[self.tcp_site_id].copy(), self.data.site_xmat[self.tcp_site_id].reshape(
            3, 3
        ).copy()

    def fingers_touch(self, geom_ids: frozenset[int]) -> bool:
        """Is any finger geom in contact with any of ``geom_ids``?"""
        d = self.data
        for i in range(d.ncon):
            g1, g2 = int(d.contact.geom1[i]), int(d.contact.geom2[i])
            if (g1 in self.finger_geom_ids and g2 in geom_ids) or (
                g2 in self.finger_geom_ids and g1 in geom_ids
            ):
                return True
        return False
