"""Wall time of recording scripted-expert demonstrations: N per task for the ten tasks (the
paper's 40 x 10 = 400 by default), both 224x224 cameras JPEG-encoded at every chunk start, one
EpisodeFile per episode. Reference, same run: the simulated duration of the recorded episodes
(real time). Also the expert's success table (successes / attempts per task).

    .venv/bin/python bench/bench_record_demos.py [--episodes-per-task 40]
writes bench/results/record_demos.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pde_contract.episodes import read_episode
from robot_server.sim.recorder import RecordConfig, record_demos
from robot_server.sim.tasks import TASK_NAMES

RESULT = Path(__file__).resolve().parent / "results" / "record_demos.json"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes-per-task", type=int, default=40)
    p.add_argument("--out", help="keep the recorded episodes here (default: a temporary directory)")
    args = p.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = Path(args.out or tmp)
        t0 = time.perf_counter()
        reports = record_demos(out_dir, RecordConfig(episodes_per_task=args.episodes_per_task))
        wall = time.perf_counter() - t0
        files = [out_dir / f for r in reports.values() for f in r.files]
        total_bytes = sum(f.stat().st_size for f in files)
        sim_s = 0.0
        for f in files:
            ep = read_episode(f)
            sim_s += sum(len(c.actions) for c in ep.chunks) / ep.control_rate_hz
    table = {
        r.task: {"successes": r.successes, "attempts": r.attempts, "rate": round(r.successes / r.attempts, 3)}
        for r in reports.values()
    }
    out = {
        "bench": "record_demos",
        "episodes_per_task": args.episodes_per_task,
        "episodes_written": len(files),
        "wall_s": round(wall, 1),
        "wall_s_per_episode": round(wall / max(1, len(files)), 3),
        "reference": "simulated duration of the recorded episodes (real time)",
        "sim_s": round(sim_s, 1),
        "x_real_time": round(sim_s / wall, 2),
        "dataset_mb": round(total_bytes / 1e6, 1),
        "expert_success": table,
        "expert_success_min_rate": min(v["rate"] for v in table.values()),
        "tasks": list(TASK_NAMES),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "command": f"python bench/bench_record_demos.py --episodes-per-task {args.episodes_per_task}",
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
