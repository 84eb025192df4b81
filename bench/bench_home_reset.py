"""Resets that finish: home moves from the default safety box's corners on franky-sim, at the
example configuration's settings (config/robot.example.toml [franka]: relative_dynamics_factor,
home_dynamics_factor, home_timeout_s, home_joints_rad).

    python bench/bench_home_reset.py          # writes bench/results/home_reset.json

For each corner of the default box (robot_server/safety.py: SafetyLimits; a corner beyond the
flange reach pulled in toward the shoulder, as the safety layer clips targets), the joint pose with
the TCP there, the tool down and the gripper's yaw kept (FR3 forward kinematics, least squares),
then two resets through the real FR3 backend (FrankaRobot -> franky -> franky-sim): home -> corner
(a task's reset pose) and corner -> home. Each reset's planned duration and deadline
(robot_server/robots/franka/home.py) against the robot time it took. "before": the plans the old
example's home_dynamics_factor 0.15 gives for the same moves (nothing moved: at 0.1 x 0.15 the
corner -> home moves need 39 s and more, against the 30 s home_timeout_s).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from typing import Any

import _common  # sets sys.path for this checkout
import numpy as np
from scipy.optimize import least_squares

from robot_server.robots.franka.config import FrankaConfig
from robot_server.robots.franka.home import HOME_MARGIN, HOME_SLACK_S, plan_home
from robot_server.safety import FR3_JOINT_LOWER_RAD, FR3_JOINT_UPPER_RAD, SafetyLimits, fr3_tcp_frame

EXAMPLE = _common.REPO_ROOT / "config" / "robot.example.toml"
OLD_HOME_DYNAMICS_FACTOR = 0.15  # the example file's before this change
FLANGE_TO_TCP_M = 0.107 + 0.1034


def corner_targets(limits: SafetyLimits) -> list[tuple[list[float], list[float]]]:
    """(box corner, the TCP target for it): the corner, or pulled toward the shoulder until the
    flange (tool down: 0.21 m above the TCP) is within reach."""
    out = []
    for corner in itertools.product(*zip(limits.workspace_min_m, limits.workspace_max_m, strict=True)):
        tcp = np.asarray(corner, float)
        shoulder = np.asarray(limits.shoulder_m)
        rel = tcp + np.array([0.0, 0.0, FLANGE_TO_TCP_M]) - shoulder
        reach = float(np.linalg.norm(rel))
        if reach > limits.max_flange_reach_m:
            tcp = shoulder + rel * (limits.max_flange_reach_m / reach) - [0.0, 0.0, FLANGE_TO_TCP_M]
        out.append(([float(c) for c in corner], [round(float(t), 4) for t in tcp]))
    return out


def solve_pose(target: np.ndarray, home: np.ndarray, margin_rad: float) -> np.ndarray:
    """Joints with the TCP at ``target``, the tool pointing down and the gripper's yaw in the world
    as at home (joint 7 follows joint 1), near the home pose otherwise."""
    seed = home.copy()
    seed[0] = np.arctan2(target[1], target[0])
    seed[6] = home[6] + seed[0]
    lo, hi = FR3_JOINT_LOWER_RAD + margin_rad, FR3_JOINT_UPPER_RAD - margin_rad
    _, home_rot = fr3_tcp_frame(home)

    def residual(q: np.ndarray) -> np.ndarray:
        pos, rot = fr3_tcp_frame(q)
        yaw = q[6] - q[0] - (home[6] - home[0])
        return np.concatenate([pos - target, 0.3 * (rot[:, 2] - home_rot[:, 2]), [0.05 * yaw]])

    return np.asarray(least_squares(residual, np.clip(seed, lo, hi), bounds=(lo, hi)).x)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="franky-sim pacing (1.0: real time); durations are read on the robot's clock either way",
    )
    args = p.parse_args(argv)
    os.environ["PDE_ROBOT_CONFIG"] = str(EXAMPLE)  # the example file's [franka] values
    from robot_server.robots.franka import FrankaRobot
    from robot_server.robots.franka.fci_sim import FciSim

    limits = SafetyLimits()
    rows: list[dict[str, Any]] = []
    before: list[dict[str, Any]] = []
    t_start = time.monotonic()
    with FciSim(realtime=args.speed) as sim:
        # The example's arm, homing, timeout and home pose; franky-sim needs no RT kernel; no hand
        # (its homing is not the arm's move); latches not kept.
        config = FrankaConfig(host=sim.host, realtime="ignore", gripper=False, connect_timeout_s=10.0)
        home_q = np.asarray(config.home_joints_rad, float)
        arm = FrankaRobot(config)
        arm.connect()
        try:
            arm.home()  # start from the home pose
            for corner, target in corner_targets(limits):
                q = solve_pose(np.asarray(target), home_q, limits.joint_margin_rad)
                reached = fr3_tcp_frame(q)[0]
                for direction, goal in (("home->corner", q), ("corner->home", None)):
                    wall0 = time.monotonic()
                    error = ""
                    try:
                        arm.home(joints_rad=None if goal is None else [float(x) for x in goal])
                    except Exception as e:  # a refused or stopped reset is a result, not a crash
                        error = f"{type(e).__name__}: {e}"
                    plan, took_s = arm.last_home, arm.last_home_s
                    assert plan is not None
                    j = plan.slowest_joint
                    row = {
                        "corner_m": corner,
                        "target_m": target,
                        "ik_tcp_m": [round(float(x), 4) for x in reached],
                        "move": direction,
                        "from_rad": [round(x, 3) for x in plan.from_rad],
                        "to_rad": [round(x, 3) for x in plan.to_rad],
                        "slowest_joint": plan.slowest_joint,
                        "turn_rad": round(abs(plan.to_rad[j - 1] - plan.from_rad[j - 1]), 3),
                        "planned_s": round(plan.duration_s, 3),
                        "deadline_s": round(plan.deadline_s, 3),
                        "took_s": None if took_s is None else round(took_s, 3),
                        "wall_s": round(time.monotonic() - wall0, 2),
                        "within_deadline": took_s is not None and not error and took_s <= plan.deadline_s,
                        "error": error,
                    }
                    rows.append(row)
                    print(
                        f"{direction:13s} corner {corner}: joint {j} {row['turn_rad']:.2f} rad, planned "
                        f"{plan.duration_s:.1f} s, took {row['took_s']} s, deadline {plan.deadline_s:.1f} s"
                        + (f"  ERROR {error}" if error else ""),
                        flush=True,
                    )
                    old = plan_home(
                        plan.from_rad,
                        plan.to_rad,
                        plan.robot_factor,
                        OLD_HOME_DYNAMICS_FACTOR,
                        *_limits(arm),
                        config.home_timeout_s,
                    )
                    before.append(
                        {
                            "corner_m": corner,
                            "move": direction,
                            "planned_s": round(old.duration_s, 2),
                            "deadline_s": round(old.deadline_s, 2),
                            "refused_up_front": not old.fits,
                        }
                    )
        finally:
            arm.disconnect()
    ok = [r for r in rows if r["within_deadline"]]
    ratios = [r["took_s"] / r["planned_s"] for r in rows if r["took_s"] and r["planned_s"] > 0]
    result: dict[str, Any] = {
        "settings": {
            "config": str(EXAMPLE.relative_to(_common.REPO_ROOT)),
            "relative_dynamics_factor": config.relative_dynamics_factor,
            "home_dynamics_factor": config.home_dynamics_factor,
            "effective_factor": config.relative_dynamics_factor * config.home_dynamics_factor,
            "home_timeout_s": config.home_timeout_s,
            "deadline": f"planned x {HOME_MARGIN} + {HOME_SLACK_S} s (robot time)",
            "franky_sim_speed": args.speed,
            "box_m": [limits.workspace_min_m, limits.workspace_max_m],
            "max_flange_reach_m": limits.max_flange_reach_m,
        },
        "summary": {
            "resets": len(rows),
            "within_deadline": len(ok),
            "all_within_deadline": len(ok) == len(rows),
            "longest_took_s": max((r["took_s"] or 0.0) for r in rows),
            "took_over_planned_min": round(min(ratios), 4) if ratios else None,
            "took_over_planned_max": round(max(ratios), 4) if ratios else None,
            "before_home_dynamics_factor": OLD_HOME_DYNAMICS_FACTOR,
            "before_refused_up_front": sum(b["refused_up_front"] for b in before),
            "before_longest_planned_s": max(b["planned_s"] for b in before),
            "wall_s": round(time.monotonic() - t_start, 1),
        },
        "resets": rows,
        "before": before,
    }
    _common.write_result(
        "home_reset", result, " ".join(["python", "bench/bench_home_reset.py", *sys.argv[1:]])
    )
    return 0 if len(ok) == len(rows) else 1


def _limits(arm: Any) -> tuple[Any, Any, Any]:
    robot = arm.franky_robot
    return (
        robot.joint_velocity_limit.get(),
        robot.joint_acceleration_limit.get(),
        robot.joint_jerk_limit.get(),
    )


if __name__ == "__main__":
    raise SystemExit(main())
