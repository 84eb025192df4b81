"""Wall time of exporting recorded demonstrations to a LeRobotDataset (`pde data export-lerobot`;
--version v3.0, the default, or v2.1), per video codec. References, same run: reading the episode files and
decoding every JPEG frame (the input side alone), and the real-time duration of the exported rows.

    .venv/bin/python bench/bench_lerobot_export.py --in data/demos [--vcodecs libsvtav1,h264] [--version v2.1]
writes bench/results/lerobot_export.json (or --result). Without --in it first records --episodes-per-task
expert episodes per task (--tasks: only those) at 224x224 into a temporary folder (not timed). The
result counts the rows whose observation was read at their own tick (``rows_with_own_observation``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pde_contract.episodes import read_episode
from pde_contract.jpeg import decode_jpeg
from pde_storage.lerobot_export import ExportConfig, export_lerobot, find_episode_files

RESULT = Path(__file__).resolve().parent / "results" / "lerobot_export.json"


def _read_all(in_dir: Path) -> tuple[float, int]:
    """Seconds to read every episode and decode every camera frame; the input's size in bytes."""
    t0 = time.perf_counter()
    size = 0
    for path in find_episode_files(in_dir):
        size += path.stat().st_size
        for chunk in read_episode(path).chunks:
            for frame in chunk.observation.cameras:
                decode_jpeg(frame.jpeg)
    return time.perf_counter() - t0, size


def _size_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--in", dest="in_dir", help="folder of episode files (default: record some first)")
    p.add_argument("--episodes-per-task", type=int, default=4, help="without --in: demos to record per task")
    p.add_argument("--vcodecs", default="libsvtav1,h264")
    p.add_argument("--version", default="v3.0", choices=["v3.0", "v2.1"], help="the LeRobotDataset layout")
    p.add_argument("--tasks", default="", help="without --in: comma-separated tasks to record (default: all)")
    p.add_argument("--result", type=Path, default=RESULT, help=f"result file (default {RESULT})")
    args = p.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        in_dir = Path(args.in_dir) if args.in_dir else Path(tmp) / "demos"
        if not args.in_dir:
            from robot_server.sim.recorder import RecordConfig, record_demos

            tasks = {"tasks": args.tasks.split(",")} if args.tasks else {}
            record_demos(in_dir, RecordConfig(episodes_per_task=args.episodes_per_task, **tasks))
        read_s, in_bytes = _read_all(in_dir)
        runs = {}
        for codec in args.vcodecs.split(","):
            out = Path(tmp) / f"lerobot-{codec}"
            report = export_lerobot(in_dir, out, ExportConfig(vcodec=codec, version=args.version))
            fps = json.loads((out / "meta/info.json").read_text())["fps"]
            runs[codec] = {
                "wall_s": round(report.wall_s, 1),
                "wall_s_per_episode": round(report.wall_s / report.episodes, 3),
                "x_reading_episodes": round(report.wall_s / read_s, 2),
                "x_real_time": round(report.frames / fps / report.wall_s, 1),
                "dataset_mb": round(_size_bytes(out) / 1e6, 1),
            }
            episodes, frames = report.episodes, report.frames
            provenance = (out / "meta/pde_episodes.jsonl").read_text().splitlines()
            own_rows = sum(json.loads(line)["rows_with_own_observation"] for line in provenance)
            shutil.rmtree(out)
    out_json = {
        "bench": "lerobot_export",
        "version": args.version,
        "input": str(
            args.in_dir or f"{args.episodes_per_task} expert demos per task, 224x224, recorded here"
        ),
        "episodes": episodes,
        "frames": frames,
        # rows whose state and frames were read at their own tick (the rest repeat their chunk start's)
        "rows_with_own_observation": own_rows,
        "input_mb": round(in_bytes / 1e6, 1),
        "reference": "reading every episode file and decoding every JPEG frame, same run",
        "reference_read_s": round(read_s, 1),
        "exports": runs,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "command": "python bench/bench_lerobot_export.py "
        + (f"--in {args.in_dir}" if args.in_dir else f"--episodes-per-task {args.episodes_per_task}")
        + (f" --tasks {args.tasks}" if args.tasks and not args.in_dir else "")
        + f" --vcodecs {args.vcodecs} --version {args.version}"
        + (f" --result {args.result}" if args.result != RESULT else ""),
    }
    args.result.parent.mkdir(parents=True, exist_ok=True)
    args.result.write_text(json.dumps(out_json, indent=1) + "\n")
    print(json.dumps(out_json, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
