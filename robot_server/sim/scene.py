"""The tabletop scene as MJCF fragments. The robot base is the world origin, x points away from the
robot, z up; the table surface is z = 0."""

from __future__ import annotations

TABLE_TOP_Z_M = 0.0

SCENES = ("table", "tabletop")


def assets_xml(scene: str) -> str:
    return """
<asset>
  <texture name="wood" type="2d" builtin="flat" rgb1="0.62 0.5 0.38" width="64" height="64"/>
  <material name="table" texture="wood" rgba="1 1 1 1"/>
</asset>
"""


def table_xml() -> str:
    return (
        '<geom name="table" type="box" pos="0.35 0 -0.025" size="0.7 0.8 0.025" material="table" '
        'friction="1 0.005 0.0001"/>'
        '<geom name="floor" type="plane" pos="0 0 -0.75" size="3 3 0.1" rgba="0.35 0.35 0.38 1" '
        'contype="0" conaffinity="0"/>'
    )


def worldbody_xml(scene: str) -> str:
    return table_xml()


def actuators_xml(scene: str) -> str:
    return ""
