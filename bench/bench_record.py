"""Demonstration recording at the control rate: rows expected vs recorded vs dropped, counted.

The recorder (teleop/recorder.py) against the sim robot server in realtime pacing (10 Hz, two
cameras, as in the lab): commanded takes from a scripted source (a square path with the gripper
toggling, one row per tick through the safety path with TeleopSettings.record_hold_ticks copies
that the next row replaces), and hand-guided takes (a ScriptedHand pushes the limp arm; the
recorder samples on the robot clock's 10 Hz grid).

Per take: rows_expected (control ticks the take spanned on the robot's clock), rows_recorded,
rows_dropped (ticks without a recorded row), rows_stale_observation (rows recorded with frames from
an earlier tick), and for commanded takes rows_executed, chunks_preempted, rows_clipped and
rows_watchdog_dropped from the server's own counters and replies, rows_repeated (ticks that ran a
copy of the row before: the next row came late) and rows_state_late (joint_abs twin measured a tick
late).

    python bench/bench_record.py
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import asdict
from typing import Any

import _common  # noqa: F401  (sets sys.path)
import numpy as np
from _common import write_result
from _server import ServerProcess, ServerSpec, sim_result_header

from pde_contract.client import RobotClient
from pde_contract.tasks import load_tasks
from teleop.guiding import HandGuidingSource
from teleop.recorder import Recorder, TakeStats
from teleop.scripted import ScriptedSource
from teleop.settings import TeleopSettings

TASK = load_tasks(None).get("put_bowl_on_top_rack")
HAND_PATH_M = ((0.08, 0.0, 0.0), (0.08, 0.08, -0.05), (0.0, 0.08, -0.05), (0.0, 0.0, 0.0))


def square_rows(n: int, step_m: float = 0.004) -> list[np.ndarray]:
    """A 10 cm square in x/y, 25 ticks a side, the gripper toggling every 50 rows."""
    sides = [(step_m, 0.0), (0.0, step_m), (-step_m, 0.0), (0.0, -step_m)]
    rows = []
    for i in range(n):
        dx, dy = sides[(i // 25) % 4]
        width = 0.08 if (i // 50) % 2 == 0 else 0.0
        rows.append(np.array([dx, dy, 0.0, 0.0, 0.0, 0.0, width]))
    return rows


def _totals(takes: list[TakeStats]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "takes": len(takes),
        "rows_expected": sum(t.rows_expected for t in takes),
        "rows_recorded": sum(t.rows_recorded for t in takes),
        "rows_dropped": sum(t.rows_dropped for t in takes),
        "rows_stale_observation": sum(t.rows_stale_observation for t in takes),
    }
    if takes and takes[0].rows_executed is not None:
        out["rows_executed"] = sum(t.rows_executed or 0 for t in takes)
        out["chunks_preempted"] = sum(t.chunks_preempted or 0 for t in takes)
        out["rows_clipped"] = sum(t.rows_clipped or 0 for t in takes)
        out["rows_watchdog_dropped"] = sum(t.rows_watchdog_dropped or 0 for t in takes)
        out["rows_repeated"] = sum(t.rows_repeated or 0 for t in takes)
        out["rows_state_late"] = sum(t.rows_state_late or 0 for t in takes)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--takes", type=int, default=3, help="takes per source")
    p.add_argument("--rows", type=int, default=200, help="rows per take (20 s at 10 Hz)")
    p.add_argument("--image-size", type=int, default=224, help="camera side, pixels")
    args = p.parse_args()
    spec = ServerSpec(
        backend="sim", width=args.image_size, height=args.image_size, guiding_hand_path_m=HAND_PATH_M
    )
    result: dict[str, Any] = sim_result_header(spec, TASK.name)
    settings = TeleopSettings(max_take_s=args.rows / spec.control_rate_hz + 10)
    with (
        ServerProcess(spec) as server,
        RobotClient(server.cmd_endpoint, name="bench", timeout_s=5.0) as client,
    ):
        recorder = Recorder(client, settings)
        for name, source in (
            ("commanded", ScriptedSource(square_rows(args.rows))),
            ("guided", HandGuidingSource(max_ticks=args.rows)),
        ):
            takes = []
            for i in range(args.takes):
                recorder.reset(TASK, seed=i)
                with source:
                    takes.append(recorder.record(source, TASK, seed=i).stats)
                print(name, i, asdict(takes[-1]), flush=True)
            result[name] = {"totals": _totals(takes), "per_take": [asdict(t) for t in takes]}
    result["load_average_1_5_15_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["server_counters"] = server.result.get("counters", {})
    write_result("record", result, " ".join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
