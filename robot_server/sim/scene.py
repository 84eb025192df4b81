"""The tabletop scene as MJCF fragments (App. C.2 of the paper): the green container, the bowl, the
tape, a small object on a marked region, two stacked drawers on slide joints with handles, a
two-level rack and a marked "in front of the camera" region.

Frame: the robot base is the world origin, x points away from the robot, y to its left, z up; the
table surface is z = 0. Sizes fit the FR3 hand (8 cm stroke): the container is 4.5 cm across, the
tape 5.6 cm, the bowl is picked by its 8 mm rim. Drawer handles are vertical bars so the pointing-
down hand can straddle them with its fingers across y, and the two handles are offset in y so the
hand and wrist clear one handle while pulling the other.

To add a prop: describe it with a ``Prop`` (a body with a free joint), add it to ``PROPS`` and lay it
out in the task's ``reset``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TABLE_TOP_Z_M = 0.0
SCENES = ("table", "tabletop")

# Free objects are laid out in this box (x, y) on the table; everything fixed lies outside it.
LAYOUT_X_M = (0.38, 0.58)
LAYOUT_Y_M = (-0.15, 0.15)

# The two-level rack: a low shelf near the robot and a high shelf behind it (right side).
RACK_Y_M = -0.36
RACK_HALF_WIDTH_Y_M = 0.12


@dataclass(frozen=True)
class Shelf:
    x_m: tuple[float, float]
    top_z_m: float


RACK_SHELVES = {"bottom": Shelf((0.36, 0.50), 0.06), "top": Shelf((0.50, 0.64), 0.16)}

# The marked region in front of the external camera (which looks at the robot from x = 1.25 m).
CAMERA_REGION_X_M = (0.64, 0.78)
CAMERA_REGION_Y_M = (-0.21, -0.07)

# The marked region with the small object.
SMALL_OBJECT_REGION_CENTER_M = (0.70, 0.15)

# The cabinet with two drawers (left side), fronts facing the robot.
CABINET_FRONT_X_M = 0.42
CABINET_DEPTH_M = 0.24
CABINET_Y_M = 0.37
CABINET_HALF_WIDTH_Y_M = 0.12
DRAWER_SLOT_HEIGHT_M = 0.11
DRAWER_TRAVEL_M = 0.18
CABINET_TOP_Z_M = 2 * DRAWER_SLOT_HEIGHT_M + 0.012
DRAWER_INNER_HALF_X_M = 0.105
DRAWER_INNER_HALF_Y_M = 0.1
DRAWER_WALL_HEIGHT_M = 0.08
DRAWER_FLOOR_Z = {"bottom": 0.012, "top": 0.012 + DRAWER_SLOT_HEIGHT_M}
# Handle bar (vertical) in front of each drawer front, offset in y (see module doc).
HANDLE_OFFSET_X_M = 0.065
HANDLE_Y_OFFSET = {"bottom": -0.07, "top": 0.07}
HANDLE_HALF_LENGTH_M = 0.025
HANDLE_CENTER_Z_REL_M = {"bottom": 0.045, "top": 0.075}  # above the drawer floor


@dataclass(frozen=True)
class Prop:
    """A free object. ``rest_z_m``: height of the body origin when it stands on a surface at z 0.
    ``radius_m``: footprint radius for non-overlapping layouts."""

    name: str
    rest_z_m: float
    radius_m: float
    body_xml: str

    @property
    def joint(self) -> str:
        return f"{self.name}_joint"


def _bowl_xml() -> str:
    # A floor disc and a ring of 16 wall boxes; one box faces -x so the hand can pinch it across x.
    n, ring_r, wall_half_t, wall_half_h = 16, 0.06, 0.004, 0.025
    half_len = math.pi * ring_r / n + 0.002
    walls = []
    for k in range(n):
        a = 2 * math.pi * k / n
        walls.append(
            f'<geom name="bowl_wall{k}" type="box" size="{wall_half_t} {half_len:.4f} {wall_half_h}" '
            f'pos="{ring_r * math.cos(a):.5f} {ring_r * math.sin(a):.5f} {wall_half_h + 0.004}" '
            f'euler="0 0 {a:.5f}" class="prop" material="bowl"/>'
        )
    return (
        '<body name="bowl" pos="0.45 0 0"><freejoint name="bowl_joint"/>'
        '<inertial pos="0 0 0.02" mass="0.15" diaginertia="0.0003 0.0003 0.0005"/>'
        f'<geom name="bowl_floor" type="cylinder" size="{ring_r} 0.004" pos="0 0 0.004" class="prop" '
        'material="bowl"/>' + "".join(walls) + "</body>"
    )


PROPS: dict[str, Prop] = {
    "green_container": Prop(
        name="green_container",
        rest_z_m=0.03,
        radius_m=0.035,
        body_xml=(
            '<body name="green_container" pos="0.5 0.1 0.03"><freejoint name="green_container_joint"/>'
            '<geom name="green_container" type="box" size="0.025 0.0225 0.03" mass="0.1" class="prop" '
            'rgba="0.15 0.65 0.2 1"/>'
            '<geom type="box" size="0.026 0.0235 0.004" pos="0 0 0.028" class="visual" '
            'rgba="0.1 0.45 0.12 1"/></body>'
        ),
    ),
    "bowl": Prop(name="bowl", rest_z_m=0.0, radius_m=0.068, body_xml=_bowl_xml()),
    "tape": Prop(
        name="tape",
        rest_z_m=0.015,
        radius_m=0.03,
        body_xml=(
            '<body name="tape" pos="0.5 -0.1 0.015"><freejoint name="tape_joint"/>'
            '<geom name="tape" type="cylinder" size="0.028 0.015" mass="0.08" class="prop" '
            'rgba="0.85 0.75 0.45 1"/>'
            '<geom type="cylinder" size="0.016 0.0152" class="visual" rgba="0.45 0.35 0.25 1"/></body>'
        ),
    ),
    "small_object": Prop(
        name="small_object",
        rest_z_m=0.015,
        radius_m=0.025,
        body_xml=(
            f'<body name="small_object" pos="{SMALL_OBJECT_REGION_CENTER_M[0]} '
            f'{SMALL_OBJECT_REGION_CENTER_M[1]} 0.015"><freejoint name="small_object_joint"/>'
            '<geom name="small_object" type="box" size="0.015 0.015 0.015" mass="0.05" class="prop" '
            'rgba="0.8 0.15 0.15 1"/></body>'
        ),
    ),
}


def assets_xml(scene: str) -> str:
    return """
<asset>
  <material name="table" rgba="0.62 0.5 0.38 1"/>
  <material name="wood" rgba="0.78 0.66 0.5 1"/>
  <material name="drawer" rgba="0.85 0.85 0.82 1"/>
  <material name="metal" rgba="0.35 0.35 0.38 1"/>
  <material name="bowl" rgba="0.3 0.45 0.8 1"/>
</asset>
"""


def defaults_xml() -> str:
    return """
<default class="prop">
    <geom contype="1" conaffinity="1" friction="1 0.005 0.0001" condim="4" group="0"/>
  </default>
  <default class="fixture">
    <geom contype="1" conaffinity="1" friction="0.8 0.005 0.0001" group="0"/>
  </default>
  <default class="visual">
    <geom contype="0" conaffinity="0" group="2" mass="0"/>
  </default>
"""


def _table_xml() -> str:
    return (
        '<geom name="table" type="box" pos="0.35 0 -0.025" size="0.7 0.8 0.025" material="table" '
        'class="fixture"/>'
        '<geom name="floor" type="plane" pos="0 0 -0.75" size="3 3 1" rgba="0.35 0.35 0.38 1" '
        'class="visual"/>'
    )


def _box(
    name: str, center: tuple[float, float, float], half: tuple[float, float, float], cls: str, material: str
) -> str:
    c = " ".join(f"{v:.4f}" for v in center)
    h = " ".join(f"{v:.4f}" for v in half)
    label = f'name="{name}" ' if name else ""
    return f'<geom {label}type="box" pos="{c}" size="{h}" class="{cls}" material="{material}"/>'


def _rack_xml() -> str:
    parts = []
    for level, shelf in RACK_SHELVES.items():
        (x0, x1), top_z = shelf.x_m, shelf.top_z_m
        cx, hx = (x0 + x1) / 2, (x1 - x0) / 2
        parts.append(
            _box(
                f"rack_{level}",
                (cx, RACK_Y_M, top_z - 0.005),
                (hx, RACK_HALF_WIDTH_Y_M, 0.005),
                "fixture",
                "wood",
            )
        )
        for sx in (-1, 1):  # legs
            for sy in (-1, 1):
                parts.append(
                    _box(
                        "",
                        (
                            cx + sx * (hx - 0.01),
                            RACK_Y_M + sy * (RACK_HALF_WIDTH_Y_M - 0.01),
                            (top_z - 0.01) / 2,
                        ),
                        (0.008, 0.008, (top_z - 0.01) / 2),
                        "fixture",
                        "metal",
                    )
                )
        for sy in (-1, 1):  # low side rails, decoration only
            parts.append(
                _box(
                    "",
                    (cx, RACK_Y_M + sy * RACK_HALF_WIDTH_Y_M, top_z + 0.012),
                    (hx, 0.004, 0.004),
                    "visual",
                    "metal",
                )
            )
    return f'<body name="rack">{"".join(parts)}</body>'


def _cabinet_xml() -> str:
    fx, depth, cy, hw = CABINET_FRONT_X_M, CABINET_DEPTH_M, CABINET_Y_M, CABINET_HALF_WIDTH_Y_M
    height = CABINET_TOP_Z_M
    cx = fx + depth / 2
    parts = [
        _box("cabinet_top", (cx, cy, height - 0.006), (depth / 2, hw, 0.006), "fixture", "wood"),
        _box(
            "cabinet_back", (fx + depth - 0.006, cy, height / 2), (0.006, hw, height / 2), "fixture", "wood"
        ),
        _box(
            "cabinet_left",
            (cx, cy + hw - 0.006, height / 2),
            (depth / 2, 0.006, height / 2),
            "fixture",
            "wood",
        ),
        _box(
            "cabinet_right",
            (cx, cy - hw + 0.006, height / 2),
            (depth / 2, 0.006, height / 2),
            "fixture",
            "wood",
        ),
        _box(
            "cabinet_shelf", (cx, cy, DRAWER_SLOT_HEIGHT_M + 0.006), (depth / 2, hw, 0.003), "fixture", "wood"
        ),
        _box("cabinet_floor", (cx, cy, 0.003), (depth / 2, hw, 0.003), "fixture", "wood"),
    ]
    drawers = [_drawer_xml(level) for level in ("bottom", "top")]
    return f'<body name="cabinet">{"".join(parts)}{"".join(drawers)}</body>'


def _drawer_xml(level: str) -> str:
    """A drawer body whose origin is at the centre of its floor; it slides toward the robot (-x)."""
    hx, hy, wall_h = DRAWER_INNER_HALF_X_M, DRAWER_INNER_HALF_Y_M, DRAWER_WALL_HEIGHT_M
    floor_z = DRAWER_FLOOR_Z[level]
    ox = CABINET_FRONT_X_M + 0.008 + hx  # inner centre when closed
    hy_off = HANDLE_Y_OFFSET[level]
    hz = HANDLE_CENTER_Z_REL_M[level]
    bar_x = -hx - 0.008 - HANDLE_OFFSET_X_M
    front_h = DRAWER_SLOT_HEIGHT_M - 0.012
    return f"""
<body name="{level}_drawer" pos="{ox:.4f} {CABINET_Y_M:.4f} {floor_z:.4f}">
  <joint name="{level}_drawer_slide" type="slide" axis="-1 0 0" range="0 {DRAWER_TRAVEL_M}" damping="8"
         frictionloss="0.5" armature="0.2"/>
  <inertial pos="0 0 0.03" mass="0.6" diaginertia="0.004 0.004 0.006"/>
  {_box(f"{level}_drawer_floor", (0, 0, -0.004), (hx + 0.008, hy + 0.008, 0.004), "fixture", "drawer")}
  {
        _box(
            f"{level}_drawer_front",
            (-hx - 0.004, 0, front_h / 2 - 0.008),
            (0.004, hy + 0.012, front_h / 2),
            "fixture",
            "drawer",
        )
    }
  {_box("", (hx + 0.004, 0, wall_h / 2), (0.004, hy, wall_h / 2), "fixture", "drawer")}
  {_box("", (0, hy + 0.004, wall_h / 2), (hx, 0.004, wall_h / 2), "fixture", "drawer")}
  {_box("", (0, -hy - 0.004, wall_h / 2), (hx, 0.004, wall_h / 2), "fixture", "drawer")}
  {
        _box(
            f"{level}_drawer_handle",
            (bar_x, hy_off, hz),
            (0.006, 0.006, HANDLE_HALF_LENGTH_M),
            "fixture",
            "metal",
        )
    }
  {
        _box(
            "",
            ((bar_x - hx - 0.008) / 2, hy_off, hz + HANDLE_HALF_LENGTH_M - 0.005),
            ((bar_x + hx + 0.008) / -2 + 0.006, 0.005, 0.005),
            "fixture",
            "metal",
        )
    }
  {
        _box(
            "",
            ((bar_x - hx - 0.008) / 2, hy_off, hz - HANDLE_HALF_LENGTH_M + 0.005),
            ((bar_x + hx + 0.008) / -2 + 0.006, 0.005, 0.005),
            "fixture",
            "metal",
        )
    }
</body>"""


def _marks_xml() -> str:
    (x0, x1), (y0, y1) = CAMERA_REGION_X_M, CAMERA_REGION_Y_M
    sx, sy = SMALL_OBJECT_REGION_CENTER_M
    return (
        f'<geom name="camera_region" type="box" pos="{(x0 + x1) / 2} {(y0 + y1) / 2} 0.0005" '
        f'size="{(x1 - x0) / 2} {(y1 - y0) / 2} 0.0005" class="visual" rgba="0.95 0.85 0.2 1"/>'
        f'<geom name="small_object_region" type="box" pos="{sx} {sy} 0.0005" size="0.04 0.04 0.0005" '
        'class="visual" rgba="0.2 0.3 0.9 1"/>'
    )


def worldbody_xml(scene: str) -> str:
    if scene == "table":
        return _table_xml()
    return (
        _table_xml()
        + _marks_xml()
        + _rack_xml()
        + _cabinet_xml()
        + "".join(p.body_xml for p in PROPS.values())
    )


def actuators_xml(scene: str) -> str:
    return ""


def contact_xml(scene: str) -> str:
    if scene == "table":
        return ""
    # The drawers slide on their joints; contacts with their own cabinet would only add friction.
    return (
        '<contact><exclude body1="cabinet" body2="top_drawer"/>'
        '<exclude body1="cabinet" body2="bottom_drawer"/>'
        '<exclude body1="top_drawer" body2="bottom_drawer"/></contact>'
    )
