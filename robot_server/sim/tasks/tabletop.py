"""The ten tabletop tasks: one object, one destination each. Every task uses the same fixed scene
(scene.py); ``reset`` re-lays the free objects from the seed and closes the drawers; ``success``
checks the object's pose on simulator state and that the hand has let go of it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pde_contract.tasks import PAPER_TASKS
from robot_server.sim import scene
from robot_server.sim.tasks.base import Task
from robot_server.sim.world import SimWorld

# A drawer counts as open from this far out.
DRAWER_OPEN_M = 0.08
# Free objects keep at least this gap between footprints in a layout.
LAYOUT_GAP_M = 0.02
LAYOUT_PROPS = ("bowl", "green_container", "tape")


# --- scene state helpers (world lock held) --------------------------------------------------------


def body_pos(world: SimWorld, body: str) -> np.ndarray:
    return world.data.xpos[world.model.body(body).id].copy()


def body_yaw(world: SimWorld, body: str) -> float:
    mat = world.data.xmat[world.model.body(body).id].reshape(3, 3)
    return math.atan2(mat[1, 0], mat[0, 0])


def body_upright(world: SimWorld, body: str, max_tilt_rad: float = 0.35) -> bool:
    mat = world.data.xmat[world.model.body(body).id].reshape(3, 3)
    return bool(mat[2, 2] > math.cos(max_tilt_rad))


def drawer_opening_m(world: SimWorld, level: str) -> float:
    joint = world.model.joint(f"{level}_drawer_slide")
    return float(world.data.qpos[world.model.jnt_qposadr[joint.id]])


def prop_geom_ids(world: SimWorld, prop: str) -> frozenset[int]:
    body_id = world.model.body(prop).id
    return frozenset(int(g) for g in np.flatnonzero(world.model.geom_bodyid == body_id))


def released(world: SimWorld, prop: str) -> bool:
    return not world.fingers_touch(prop_geom_ids(world, prop))


def set_free_pose(world: SimWorld, prop: str, pos: np.ndarray, yaw_rad: float) -> None:
    joint = world.model.joint(scene.PROPS[prop].joint)
    adr = world.model.jnt_qposadr[joint.id]
    world.data.qpos[adr : adr + 3] = pos
    world.data.qpos[adr + 3 : adr + 7] = [math.cos(yaw_rad / 2), 0.0, 0.0, math.sin(yaw_rad / 2)]


def set_drawer(world: SimWorld, level: str, opening_m: float) -> None:
    joint = world.model.joint(f"{level}_drawer_slide")
    world.data.qpos[world.model.jnt_qposadr[joint.id]] = opening_m


# --- destinations ---------------------------------------------------------------------------------


def in_bowl(world: SimWorld, prop: str) -> bool:
    p, b = body_pos(world, prop), body_pos(world, "bowl")
    return bool(np.linalg.norm(p[:2] - b[:2]) < 0.045 and 0.0 < p[2] - b[2] < 0.07)


def on_rack(world: SimWorld, prop: str, level: str) -> bool:
    shelf = scene.RACK_SHELVES[level]
    (x0, x1), top_z = shelf.x_m, shelf.top_z_m
    p = body_pos(world, prop)
    rest = scene.PROPS[prop].rest_z_m
    return bool(
        x0 < p[0] < x1
        and abs(p[1] - scene.RACK_Y_M) < scene.RACK_HALF_WIDTH_Y_M
        and -0.01 < p[2] - rest - top_z < 0.03
    )


def in_front_of_camera(world: SimWorld, prop: str) -> bool:
    (x0, x1), (y0, y1) = scene.CAMERA_REGION_X_M, scene.CAMERA_REGION_Y_M
    p = body_pos(world, prop)
    return bool(x0 < p[0] < x1 and y0 < p[1] < y1 and p[2] - scene.PROPS[prop].rest_z_m < 0.02)


def in_drawer(world: SimWorld, prop: str, level: str) -> bool:
    if drawer_opening_m(world, level) < DRAWER_OPEN_M:
        return False
    d = body_pos(world, f"{level}_drawer")  # origin: centre of the drawer's inner floor
    p = body_pos(world, prop)
    return bool(
        abs(p[0] - d[0]) < scene.DRAWER_INNER_HALF_X_M
        and abs(p[1] - d[1]) < scene.DRAWER_INNER_HALF_Y_M
        and -0.005 < p[2] - d[2] < scene.DRAWER_WALL_HEIGHT_M
    )


def destination_reached(world: SimWorld, prop: str, destination: str) -> bool:
    if destination == "bowl":
        return in_bowl(world, prop)
    if destination in ("top_rack", "bottom_rack"):
        return on_rack(world, prop, destination.split("_")[0])
    if destination == "camera":
        return in_front_of_camera(world, prop)
    if destination in ("top_drawer", "bottom_drawer"):
        return in_drawer(world, prop, destination.split("_")[0])
    raise ValueError(f"unknown destination {destination!r}")


def destination_centre_xy_m(destination: str) -> tuple[float, float] | None:
    """Where a fixed destination's region is centred on the table (x, y); None for destinations that
    move with the layout (the bowl) or sit inside a drawer."""
    if destination == "camera":
        return (sum(scene.CAMERA_REGION_X_M) / 2, sum(scene.CAMERA_REGION_Y_M) / 2)
    if destination in ("top_rack", "bottom_rack"):
        return (sum(scene.RACK_SHELVES[destination.split("_")[0]].x_m) / 2, scene.RACK_Y_M)
    return None


# --- layout ---------------------------------------------------------------------------------------


# The tabletop's nominal layout: where objects sit at layout_spread 0 (a fixed, valid layout).
_NOMINAL_LAYOUT_SEED = 0


def random_layout(rng: np.random.Generator, spread: float = 1.0) -> dict[str, tuple[np.ndarray, float]]:
    """Non-overlapping (position, yaw) for the free objects inside the layout box. ``spread`` in
    [0, 1] scales each object's offset from the nominal layout (and its yaw range): 1 draws over the
    whole box and any yaw, as in the paper's demonstrations; smaller values give a narrower start
    distribution (benchmarks that need a weak policy to succeed sometimes)."""
    if not 0.0 <= spread <= 1.0:
        raise ValueError(f"layout spread {spread} outside [0, 1]")
    nominal = random_layout(np.random.default_rng(_NOMINAL_LAYOUT_SEED)) if spread < 1.0 else None
    for _ in range(1000):
        placed: dict[str, tuple[np.ndarray, float]] = {}
        for name in LAYOUT_PROPS:
            prop = scene.PROPS[name]
            xy = _draw_xy(rng, prop)
            if nominal is not None:
                xy = nominal[name][0][:2] + spread * (xy - nominal[name][0][:2])
            clear = all(
                np.linalg.norm(xy - other[0][:2]) > prop.radius_m + scene.PROPS[o].radius_m + LAYOUT_GAP_M
                for o, other in placed.items()
            )
            if not clear:
                break
            yaw = float(rng.uniform(-math.pi, math.pi))
            if nominal is not None:
                yaw = nominal[name][1] + spread * yaw
            placed[name] = (np.array([xy[0], xy[1], prop.rest_z_m]), yaw)
        if len(placed) == len(LAYOUT_PROPS):
            return placed
    raise RuntimeError("could not find a non-overlapping layout in 1000 tries: the layout box is too small")


def _draw_xy(rng: np.random.Generator, prop: scene.Prop) -> np.ndarray:
    return np.array(
        [
            rng.uniform(scene.LAYOUT_X_M[0] + prop.radius_m, scene.LAYOUT_X_M[1] - prop.radius_m),
            rng.uniform(scene.LAYOUT_Y_M[0] + prop.radius_m, scene.LAYOUT_Y_M[1] - prop.radius_m),
        ]
    )


@dataclass
class TabletopTask(Task):
    """Move ``prop`` to ``destination`` ("bowl", "top_rack", "bottom_rack", "camera", "top_drawer",
    "bottom_drawer")."""

    name: str
    prop: str
    destination: str

    def __post_init__(self) -> None:
        self.prompt = PAPER_TASKS[self.name]

    @property
    def drawer(self) -> str | None:
        return self.destination.split("_")[0] if self.destination.endswith("_drawer") else None

    def reset(self, world: SimWorld, rng: np.random.Generator) -> None:
        for name, (pos, yaw) in random_layout(rng, world.config.layout_spread).items():
            set_free_pose(world, name, pos, yaw)
        sx, sy = scene.SMALL_OBJECT_REGION_CENTER_M
        jitter = rng.uniform(-0.01, 0.01, 2)
        small = np.array([sx + jitter[0], sy + jitter[1], scene.PROPS["small_object"].rest_z_m])
        set_free_pose(world, "small_object", small, float(rng.uniform(-1, 1)))
        for level in ("top", "bottom"):
            set_drawer(world, level, 0.0)

    def success(self, world: SimWorld) -> bool:
        return (
            destination_reached(world, self.prop, self.destination)
            and released(world, self.prop)
            and (self.prop != "bowl" or body_upright(world, "bowl"))
        )


# name -> (prop, destination), in the paper's order; robot_server.sim.tasks.registry builds the
# registry from this table.
TABLETOP_TASKS: dict[str, tuple[str, str]] = {
    "put_green_container_in_bowl": ("green_container", "bowl"),
    "put_tape_on_top_rack": ("tape", "top_rack"),
    "put_bowl_on_top_rack": ("bowl", "top_rack"),
    "put_green_container_in_front_of_camera": ("green_container", "camera"),
    "put_bowl_in_front_of_camera": ("bowl", "camera"),
    "open_top_drawer_and_put_bowl_inside": ("bowl", "top_drawer"),
    "open_bottom_drawer_and_put_bowl_inside": ("bowl", "bottom_drawer"),
    "open_top_drawer_and_put_tape_inside": ("tape", "top_drawer"),
    "open_top_drawer_and_put_green_container_inside": ("green_container", "top_drawer"),
    "put_green_container_on_bottom_rack": ("green_container", "bottom_rack"),
}
