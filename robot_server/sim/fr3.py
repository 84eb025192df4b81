"""The simulated FR3: a capsule arm with the FR3's kinematics, limits and masses (see FR3.md) and a
Franka-hand-like gripper. Capsules instead of meshes because software rendering of the meshes is
several times slower (SIM.md) and the policy only needs a plausible arm in the images."""

from __future__ import annotations

import math

import numpy as np

ARM_JOINTS = tuple(f"fr3_joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("fr3_finger_left", "fr3_finger_right")
TCP_SITE = "tcp"
HAND_BODY = "fr3_hand"
FINGER_PAD_GEOMS = ("fr3_pad_left", "fr3_pad_right")
GRIPPER_ACTUATOR = "fr3_gripper"

# Safe joint limits (rad), FR3.md.
JOINT_LOWER_RAD = np.array([-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159])
JOINT_UPPER_RAD = np.array([2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159])
JOINT_VELOCITY_LIMIT_RAD_S = np.array([2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26])
JOINT_TORQUE_LIMIT_NM = np.array([87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0])
# The usual "ready" pose: TCP pointing down ~0.3 m in front of the base, fingers across y.
HOME_Q_RAD = np.array([0.0, -math.pi / 4, 0.0, -3 * math.pi / 4, 0.0, math.pi / 2, math.pi / 4])
# Position servo gains that tracked well with dampratio 1 (SIM.md).
SERVO_KP = (4500.0, 4500.0, 3500.0, 3500.0, 2000.0, 2000.0, 2000.0)
LINK_MASS_KG = (2.397, 2.927, 2.936, 2.245, 2.616, 2.327, 1.817)
GRIPPER_MAX_WIDTH_M = 0.08
# Fingers closed below this hold nothing (the real gripper's default, robots/franka/config.py).
GRIPPER_EMPTY_WIDTH_M = 0.003
TCP_OFFSET_M = 0.1034  # along the hand's z
FINGER_BASE_M = 0.0584  # finger joints sit this far along the hand's z

_ARM_RGBA = "0.93 0.93 0.93 1"
_JOINT_RGBA = "0.25 0.25 0.28 1"
_HALF_PI = f"{math.pi / 2:.10f}"


def _limits(i: int) -> str:
    return f"{JOINT_LOWER_RAD[i]:.4f} {JOINT_UPPER_RAD[i]:.4f}"


def _joint(i: int) -> str:
    return f'<joint name="{ARM_JOINTS[i]}" axis="0 0 1" range="{_limits(i)}" armature="0.1" damping="1"/>'


def _capsule(fromto: str, radius: float, mass: float, rgba: str = _ARM_RGBA) -> str:
    # Arm links collide with the world (class "arm") but not with each other.
    return f'<geom class="arm" type="capsule" fromto="{fromto}" size="{radius}" mass="{mass}" rgba="{rgba}"/>'


def arm_body_xml(wrist_camera_fovy_deg: float = 75.0) -> str:
    """The arm's body tree, to be placed in the worldbody at the base frame (= world frame)."""
    m = LINK_MASS_KG
    return f"""
<body name="fr3_link0" childclass="fr3">
  {_capsule("-0.04 0 0.0 -0.04 0 0.14", 0.07, 0.63, _JOINT_RGBA)}
  <body name="fr3_link1" pos="0 0 0.333" gravcomp="1">
    {_joint(0)}
    {_capsule("0 0 -0.19 0 0 -0.02", 0.06, m[0])}
    <body name="fr3_link2" euler="-{_HALF_PI} 0 0" gravcomp="1">
      {_joint(1)}
      {_capsule("0 0 -0.06 0 0 0.06", 0.06, 0.3, _JOINT_RGBA)}
      {_capsule("0 0 0 0 -0.25 0", 0.055, m[1])}
      <body name="fr3_link3" pos="0 -0.316 0" euler="{_HALF_PI} 0 0" gravcomp="1">
        {_joint(2)}
        {_capsule("0 0 -0.1 0 0 -0.02", 0.055, m[2])}
        {_capsule("0 0 -0.02 0.0825 0 -0.02", 0.055, 0.2)}
        <body name="fr3_link4" pos="0.0825 0 0" euler="{_HALF_PI} 0 0" gravcomp="1">
          {_joint(3)}
          {_capsule("0 0 -0.06 0 0 0.06", 0.055, 0.3, _JOINT_RGBA)}
          {_capsule("0 0 0 -0.0825 0.08 0", 0.055, m[3])}
          <body name="fr3_link5" pos="-0.0825 0.384 0" euler="-{_HALF_PI} 0 0" gravcomp="1">
            {_joint(4)}
            {_capsule("0 0 -0.26 0 0 -0.05", 0.05, m[4])}
            <body name="fr3_link6" euler="{_HALF_PI} 0 0" gravcomp="1">
              {_joint(5)}
              {_capsule("0 0 -0.05 0 0 0.03", 0.05, 0.3, _JOINT_RGBA)}
              {_capsule("0 0 0 0.088 0 0", 0.045, m[5])}
              <body name="fr3_link7" pos="0.088 0 0" euler="{_HALF_PI} 0 0" gravcomp="1">
                {_joint(6)}
                {_capsule("0 0 -0.03 0 0 0.09", 0.045, m[6], _JOINT_RGBA)}
                {_hand_xml(wrist_camera_fovy_deg)}
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>
  </body>
</body>
"""


def _hand_xml(wrist_camera_fovy_deg: float) -> str:
    pad = (
        'type="box" size="0.009 0.006 0.022" mass="0.01" friction="1.5 0.02 0.002" condim="4" '
        'priority="1" solref="0.01 1" solimp="0.95 0.99 0.001" rgba="0.2 0.2 0.2 1"'
    )
    finger = 'type="box" size="0.01 0.008 0.012" mass="0.019" rgba="0.93 0.93 0.93 1"'
    # Wrist camera on the hand's -x side (toward the robot at home), looking along the hand's z and
    # tilted forward past the fingertips; image x along the finger axis, the fingertips at the bottom
    # corners, the scene ahead of the hand in the middle.
    return f"""
<body name="{HAND_BODY}" pos="0 0 0.107" euler="0 0 -{math.pi / 4:.10f}" gravcomp="1">
  <geom class="arm" type="box" pos="0 0 0.03" size="0.025 0.095 0.028" mass="0.654" rgba="0.93 0.93 0.93 1"/>
  <geom class="arm" type="capsule" fromto="0 0 0 0 0 0.02" size="0.04" mass="0.001" rgba="{_JOINT_RGBA}"/>
  <site name="{TCP_SITE}" pos="0 0 {TCP_OFFSET_M}" size="0.004" rgba="1 0 0 0" group="5"/>
  <camera name="wrist" pos="-0.06 0 0.065" xyaxes="0 -1 0 -0.919 0 0.394" fovy="{wrist_camera_fovy_deg}"/>
  <geom class="arm" type="box" pos="-0.062 0 0.045" size="0.012 0.03 0.018" mass="0.001"
        rgba="0.1 0.1 0.12 1"/>
  <body name="fr3_finger_left_body" pos="0 0 {FINGER_BASE_M}" gravcomp="1">
    <joint name="{FINGER_JOINTS[0]}" type="slide" axis="0 1 0" range="0 0.04" armature="0.01" damping="2"/>
    <geom class="finger" {finger} pos="0 0.012 0.008"/>
    <geom name="{FINGER_PAD_GEOMS[0]}" class="finger" {pad} pos="0 0.006 0.035"/>
  </body>
  <body name="fr3_finger_right_body" pos="0 0 {FINGER_BASE_M}" gravcomp="1">
    <joint name="{FINGER_JOINTS[1]}" type="slide" axis="0 -1 0" range="0 0.04" armature="0.01" damping="2"/>
    <geom class="finger" {finger} pos="0 -0.012 0.008"/>
    <geom name="{FINGER_PAD_GEOMS[1]}" class="finger" {pad} pos="0 -0.006 0.035"/>
  </body>
</body>
"""


def defaults_xml() -> str:
    """Default classes: arm links hit the world but not each other; fingers hit everything."""
    return """
<default class="fr3">
  <default class="arm"><geom contype="2" conaffinity="1" group="1"/></default>
  <default class="finger"><geom contype="1" conaffinity="1" group="1"/></default>
</default>
"""


def actuators_xml() -> str:
    servos = "\n".join(
        f'<position name="{ARM_JOINTS[i]}_servo" joint="{ARM_JOINTS[i]}" kp="{SERVO_KP[i]}" '
        f'dampratio="1" ctrlrange="{_limits(i)}" forcerange="-{JOINT_TORQUE_LIMIT_NM[i]} '
        f'{JOINT_TORQUE_LIMIT_NM[i]}"/>'
        for i in range(7)
    )
    # One force-limited position servo on the mean finger opening: ~20 N per finger whatever the
    # object's size (SIM.md: this held 0.5 kg cubes 20/20 where a 2 N actuator lifted nothing).
    gripper = (
        f'<position name="{GRIPPER_ACTUATOR}" tendon="fr3_split" kp="5000" dampratio="1" '
        'ctrlrange="0 0.04" forcerange="-40 40"/>'
    )
    return servos + "\n" + gripper


def tendon_equality_xml() -> str:
    return f"""
<tendon>
  <fixed name="fr3_split">
    <joint joint="{FINGER_JOINTS[0]}" coef="0.5"/>
    <joint joint="{FINGER_JOINTS[1]}" coef="0.5"/>
  </fixed>
</tendon>
<equality>
  <joint joint1="{FINGER_JOINTS[0]}" joint2="{FINGER_JOINTS[1]}" solref="0.005 1" solimp="0.95 0.99 0.001"/>
</equality>
"""
