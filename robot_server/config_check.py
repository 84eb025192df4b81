"""Physical sanity of the robot configuration as a whole: what no single field's range can say
(the box against the table, the FR3's reach and the home pose; the watchdog against the control
rate). ``pde robot-server`` (start and ``--print-config``) and ``pde doctor`` all call
``check_cell``, so the three agree on what is refused."""

from __future__ import annotations

import numpy as np

from robot_server.config_file import ConfigFileError
from robot_server.robots.franka.config import DEFAULT_HOME_JOINTS_RAD, FrankaConfig
from robot_server.safety import fr3_tcp_position_m
from robot_server.settings import RobotServerSettings

# With the tool pointing down the flange sits this far above the TCP (flange 0.107 m + hand 0.1034 m).
FLANGE_ABOVE_TCP_M = 0.107 + 0.1034
# The table top is z = 0 in the robot base frame (the FR3 stands on it).
TABLE_TOP_Z_M = 0.0
# The longest watchdog the FR3 backend accepts: after the client goes silent the arm keeps
# executing its chunk this long (0.2 s default; a loop or page that hangs must stop the arm soon).
MAX_FRANKA_HEARTBEAT_TIMEOUT_S = 1.0

_AXES = "xyz"


def home_tcp_m(settings: RobotServerSettings, franka: FrankaConfig) -> np.ndarray:
    """Where every episode starts: the TCP at the home pose (franka: [franka] home_joints_rad; the
    sim homes to DEFAULT_HOME_JOINTS_RAD, its HOME_Q_RAD)."""
    q = franka.home_joints_rad if settings.backend == "franka" else DEFAULT_HOME_JOINTS_RAD
    return fr3_tcp_position_m(q)


def cell_problems(settings: RobotServerSettings, franka: FrankaConfig) -> list[str]:
    """Each way the configuration is physically wrong, as a sentence that says what to change."""
    problems: list[str] = []
    lo, hi = settings.workspace_min_m, settings.workspace_max_m
    if lo[2] < TABLE_TOP_Z_M:
        problems.append(
            f"workspace_min_m z = {lo[2]} m is below the table top (z = {TABLE_TOP_Z_M} m in the base "
            "frame): the fingers would be sent into the table. Set it to 0.01 m or more"
        )
    problems += _walls_beyond_reach(settings)
    home = home_tcp_m(settings, franka)
    outside = [
        f"{_AXES[i]} = {home[i]:.3f} m not in [{lo[i]}, {hi[i]}]"
        for i in range(3)
        if not lo[i] <= home[i] <= hi[i]
    ]
    if outside:
        problems.append(
            f"the home pose's TCP ({', '.join(f'{v:.3f}' for v in home)}) m is outside the workspace box: "
            f"{'; '.join(outside)}. Every episode would start outside the box; widen the box "
            "(workspace_min_m / workspace_max_m) or move [franka] home_joints_rad"
        )
    if settings.backend == "franka" and settings.pacing == "fast":
        problems.append(
            "pacing = fast on the FR3: fast pacing runs chunk rows back to back as fast as the CPU allows "
            "and stops time between chunks (simulation only). Set pacing = realtime (the default)"
        )
    period_s = 1.0 / settings.control_rate_hz
    hb = settings.heartbeat_timeout_s
    if settings.backend == "franka" and not period_s < hb <= MAX_FRANKA_HEARTBEAT_TIMEOUT_S:
        problems.append(
            f"heartbeat_timeout_s = {hb} s: on the FR3 the watchdog must be on, longer than one control "
            f"period ({period_s:g} s) and at most {MAX_FRANKA_HEARTBEAT_TIMEOUT_S} s (0 disables it: "
            "simulation only). The default is 0.2 s"
        )
    elif 0 < hb <= period_s:
        problems.append(
            f"heartbeat_timeout_s = {hb} s is not longer than one control period ({period_s:g} s): the "
            "watchdog would fire between two ticks. The default is 0.2 s"
        )
    return problems


def check_cell(settings: RobotServerSettings, franka: FrankaConfig) -> None:
    """Raise ``ConfigFileError`` listing every problem of ``cell_problems``."""
    problems = cell_problems(settings, franka)
    if problems:
        raise ConfigFileError(
            "the robot configuration is not physically sane:\n" + "\n".join(f"  - {p}" for p in problems)
        )


def _walls_beyond_reach(settings: RobotServerSettings) -> list[str]:
    """Each wall of the box must have a point the flange reaches with the tool down: a wall beyond
    reach bounds nothing, and a box beyond reach is a mistyped one (e.g. mm for m)."""
    lo = np.asarray(settings.workspace_min_m, dtype=float)
    hi = np.asarray(settings.workspace_max_m, dtype=float)
    shoulder = np.asarray(settings.safety_limits().shoulder_m, dtype=float)
    up = np.array([0.0, 0.0, FLANGE_ABOVE_TCP_M])
    reach = settings.max_flange_reach_m
    out = []
    for axis in range(3):
        for side, bounds in (("workspace_min_m", lo), ("workspace_max_m", hi)):
            face_lo, face_hi = lo.copy(), hi.copy()
            face_lo[axis] = face_hi[axis] = bounds[axis]
            nearest = np.clip(shoulder - up, face_lo, face_hi) + up  # the wall's flange nearest the shoulder
            distance = float(np.linalg.norm(nearest - shoulder))
            if distance > reach + 1e-9:
                out.append(
                    f"{side} {_AXES[axis]} = {bounds[axis]} m: no point of that wall is within the FR3's "
                    f"reach (the flange {distance:.3f} m from the shoulder at best, max_flange_reach_m "
                    f"{reach} m; the FR3 reaches 0.855 m). Bring the wall within reach"
                )
    return out
