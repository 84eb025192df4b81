"""How far the measured arm goes past a chunk's final target, and whether the measured TCP leaves
the workspace box, on the franka backend against franky-sim and on the MuJoCo sim backend.

    python bench/bench_chunk_end_overshoot.py      # writes bench/results/chunk_end_overshoot.json

Cases (robot_server/robots/chunk_end.py): one 5-row chunk at 1, 3 and 5 cm per tick, moving down
onto the box's floor (z = 15 mm), down into it (the last two rows clipped at the floor) and
sideways, in ``ee_delta`` and ``joint_abs``, through the real executor and safety layer with the
shipped defaults (10 Hz, FR3 relative dynamics factor 0.3). The measured TCP is sampled every
physics step in the sim and every ~4 ms from libfranka's state on franky-sim (run in its own
process).

BEFORE is the code of ``--before-ref`` (the main commit this work started from), extracted with
``git archive`` and run with this same measuring module; AFTER is this checkout. Each (code,
backend) runs in its own process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common  # sets sys.path for this checkout

# The code under test: this checkout, or (worker --code-root) an older one put first on the path.
if "--code-root" in sys.argv:
    sys.path.insert(0, sys.argv[sys.argv.index("--code-root") + 1])

BEFORE_REF = "3b6be99"  # main before the chunk-end fix
TARGET_OVERSHOOT_M = 0.003
BACKENDS = ("franka", "sim")


def _measuring_module() -> Any:
    """robot_server/robots/chunk_end.py of this checkout, whichever code it measures."""
    path = _common.REPO_ROOT / "robot_server" / "robots" / "chunk_end.py"
    spec = importlib.util.spec_from_file_location("chunk_end_measure", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _rig(ce: Any, backend: str, speed: float) -> tuple[Any, list[Any]]:
    """A chunk-end rig on ``backend`` and what closes it (in reverse order)."""
    from robot_server.executor import ChunkExecutor, ExecutorConfig
    from robot_server.safety import SafetyLimits

    limits = SafetyLimits()
    closers: list[Any] = []
    if backend == "franka":
        from robot_server.robots.franka import FrankaConfig, FrankaRobot

        sim = ce.FciSimProcess(speed).__enter__()
        closers.append(sim.__exit__)
        # wall-clock timeouts stretched with the simulator's slowness
        config = FrankaConfig(
            host=sim.host,
            realtime="ignore",
            home_dynamics_factor=0.6,
            gripper=False,
            stall_timeout_s=2.0 / speed,
            home_timeout_s=30.0 / speed,
            connect_timeout_s=10.0,
        )
        arm = FrankaRobot(config)
        arm.connect()
        closers.append(arm.disconnect)
        arm.home()
        sampler = ce.PolledSampler(arm.read_state)
        robot: Any = arm if speed == 1.0 else ce.SlowedSimRobot(arm, speed)
        # the joint step limit is a velocity times the (wall-clock) period: keep it per robot time
        limits = SafetyLimits(joint_velocity_fraction=limits.joint_velocity_fraction * speed)
        realtime = True
    else:
        from robot_server.robots.sim import SimRobot
        from robot_server.sim.world import SimWorld, SimWorldConfig

        world = SimWorld(SimWorldConfig(scene="table"))
        closers.append(world.close)
        robot = SimRobot(
            world,
            max_tcp_step_m=limits.max_step_translation_m,
            workspace_m=(limits.workspace_min_m, limits.workspace_max_m),
        )
        sampler = ce.PhysicsStepSampler(world.tcp_site_id, world.arm_qpos_adr, world.lock, world.data)
        # Realtime: the settling after a chunk's end is what is measured, and fast pacing stops the
        # sim's clock between chunks (docs/sim.md, "Fast pacing"); each tick steps the same physics.
        realtime = True
    rate_hz = 10.0 * speed
    ticks = ce.TickStates()
    executor_config = ExecutorConfig(
        control_rate_hz=rate_hz, realtime=realtime, heartbeat_timeout_s=0, limits=limits
    )
    ex = ChunkExecutor(robot, executor_config, ticks)
    ex.start()
    closers.append(ex.close)
    return ce.ChunkEndRig(ex, sampler, ticks, limits, control_rate_hz=rate_hz), closers


def _close(closers: list[Any]) -> None:
    for close in reversed(closers):
        try:
            close()
        except Exception as e:  # closing a broken rig: say so, go on
            print(f"closing the rig: {type(e).__name__}: {e}", flush=True)


def worker(backend: str, out: Path, steps_m: tuple[float, ...], franky_speed: float) -> None:
    """Run every case on one backend with the code first on sys.path; write the figures. A case
    that fails (a simulator that died) is recorded with its error and the rig is built anew."""
    ce = _measuring_module()
    speed = franky_speed if backend == "franka" else 1.0
    rig, closers = _rig(ce, backend, speed)
    cases: list[dict[str, Any]] = []
    try:
        for case in ce.all_cases(steps_m):
            for attempt in range(1, 3):
                try:
                    figures = rig.run(case, settle_s=0.6)
                except Exception as e:
                    figures = {"case": case.name, "step_m": case.step_m, "error": f"{type(e).__name__}: {e}"}
                    _close(closers)
                    rig, closers = _rig(ce, backend, speed)
                    continue
                figures["attempt"] = attempt
                # a simulator starved of CPU now and then makes ticks of uneven robot-time length,
                # and then the figures mean little: run the case again
                periods = figures["robot_period_s"] or [0.1]
                figures["robot_period_spread"] = max(periods) / min(periods)
                if figures["robot_period_spread"] <= ce.MAX_PERIOD_SPREAD:
                    break
            shown = {k: round(v, 4) for k, v in figures.items() if isinstance(v, float) and k != "step_m"}
            print(backend, case.name, shown, figures.get("error", ""), flush=True)
            cases.append(figures)
    finally:
        _close(closers)
    out.write_text(json.dumps(cases))


def _code_root(ref: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(_common.REPO_ROOT), "archive", ref], check=True, capture_output=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _summary(all_cases: list[dict[str, Any]]) -> dict[str, Any]:
    cases = [c for c in all_cases if "error" not in c]
    at_5cm = [c for c in cases if abs(c["step_m"] - 0.05) < 1e-9]
    return {
        "cases_failed": [c for c in all_cases if "error" in c],
        "overshoot_max_m": max(c["overshoot_m"] for c in cases),
        "overshoot_max_at_5cm_m": max((c["overshoot_m"] for c in at_5cm), default=0.0),
        "outside_box_max_m": max(c["outside_box_max_m"] for c in cases),
        "tcp_step_per_tick_max_m": max(c["tcp_step_per_tick_max_m"] for c in cases),
        "joint_overshoot_max_rad": max((c.get("joint_overshoot_rad", 0.0) for c in cases), default=0.0),
        "cases": cases,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before-ref", default=BEFORE_REF, help="git ref of the code measured as BEFORE")
    p.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    p.add_argument("--steps-m", nargs="+", type=float, default=[0.01, 0.03, 0.05])
    p.add_argument(
        "--franky-speed",
        type=float,
        default=0.25,
        help="franky-sim's speed (x real time); the executor runs at 10 Hz x this: 10 Hz of robot time",
    )
    p.add_argument("--worker", choices=BACKENDS, help=argparse.SUPPRESS)
    p.add_argument("--code-root", help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    steps = tuple(args.steps_m)
    if args.worker:
        worker(args.worker, args.out, steps, args.franky_speed)
        return
    started = time.monotonic()
    result: dict[str, Any] = {
        "setup": {
            "cases": "5-row chunks, ee_delta and joint_abs, down onto the floor / down into it (last 2 rows "
            "clipped) / sideways, at " + ", ".join(f"{s * 100:.0f}" for s in steps) + " cm per tick, 10 Hz",
            "overshoot": "largest distance of the measured TCP past the final target along the chunk's "
            "direction (joint_abs: past where the arm settled at the final joint target; "
            "joint_overshoot_rad: past the final joint target along the chunk's joint displacement)",
            "box": "default SafetyLimits workspace box; outside_box_max_m from every measured sample",
            "franka": "FrankaRobot (franky-control 2.0.0) against franky-sim 1.0.4 in its own process on "
            f"loopback at {args.franky_speed}x real time, the executor at {10 * args.franky_speed} Hz of "
            "wall time (SlowedSimRobot gives the backend each tick's length in robot time: ~10 Hz of robot "
            "time), relative dynamics factor 0.3 (default), samples every ~4 ms; a case whose ticks "
            "differ by more than 2x in robot time is run once more (attempt, robot_period_s)",
            "sim": "SimRobot (MuJoCo), executor realtime pacing, samples every 2 ms physics step",
            "before": f"code of {args.before_ref} (git archive), measured with this checkout's "
            "robot_server/robots/chunk_end.py",
            "after": "this checkout",
            "target": f"overshoot <= {TARGET_OVERSHOOT_M} m at 5 cm per tick, measured TCP never outside "
            "the box",
        }
    }
    with tempfile.TemporaryDirectory() as tmp:
        before_root = Path(tmp) / "before"
        before_root.mkdir()
        roots = {"before": _code_root(args.before_ref, before_root), "after": _common.REPO_ROOT}
        for phase, root in roots.items():
            result[phase] = {}
            for backend in args.backends:
                out = Path(tmp) / f"{phase}-{backend}.json"
                env = {**os.environ, "PYTHONPATH": str(root)}
                cmd = [sys.executable, __file__, "--worker", backend, "--code-root", str(root)]
                cmd += ["--out", str(out), "--steps-m", *map(str, steps)]
                cmd += ["--franky-speed", str(args.franky_speed)]
                subprocess.run(cmd, check=True, env=env)
                result[phase][backend] = _summary(json.loads(out.read_text()))
    for phase in ("before", "after"):
        every = [c for b in args.backends for c in result[phase][b]["cases"]]
        result[phase]["overshoot_max_m"] = max(c["overshoot_m"] for c in every)
        result[phase]["outside_box_max_m"] = max(c["outside_box_max_m"] for c in every)
    after = result["after"]
    result["target_met"] = bool(
        all(after[b]["overshoot_max_at_5cm_m"] <= TARGET_OVERSHOOT_M for b in args.backends)
        and after["outside_box_max_m"] == 0.0
    )
    result["wall_s"] = round(time.monotonic() - started, 1)
    _common.write_result("chunk_end_overshoot", result, " ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
