"""``pde data ...``: tools for datasets of episode files (expert demos, stored episodes).

pde data export-lerobot --in data/demos --out data/demos_lerobot   LeRobotDataset v3.0 (or --version v2.1)
"""

from __future__ import annotations

import argparse
import sys


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="dataset tools for episode files")
    sub = p.add_subparsers(dest="command", required=True)
    ex = sub.add_parser(
        "export-lerobot",
        help="convert a folder of episode files (demos, stored episodes) to a LeRobotDataset (v3.0)",
    )
    ex.add_argument("--in", dest="in_dir", required=True, help="folder of *.episode / *.msgpack files")
    ex.add_argument("--out", required=True, help="dataset root to create (LeRobotDataset(root=...))")
    ex.add_argument("--fps", type=int, help="dataset fps; must equal the episodes' control rate (default)")
    ex.add_argument("--vcodec", choices=["libsvtav1", "h264"], default="libsvtav1", help="video codec")
    ex.add_argument("--crf", type=int, help="video quality, lower is better (default: 30 AV1, 23 H.264)")
    ex.add_argument("--gop", type=int, default=2, help="keyframe every N frames (default 2)")
    ex.add_argument(
        "--task-prompt",
        choices=["rollout", "canonical"],
        default="rollout",
        help="which prompt becomes the LeRobot task: the one the episode ran with (default) or the canonical",
    )
    ex.add_argument(
        "--version",
        choices=["v3.0", "v2.1"],
        default="v3.0",
        help="the layout: v3.0 (LeRobot >= 0.4, 0.6.1 included; default) or v2.1 (LeRobot 0.3.x)",
    )
    ex.add_argument("--only-success", action="store_true", help="skip episodes not labelled successful")
    ex.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    return p


def main(argv: list[str] | None = None, prog: str = "pde data") -> int:
    args = _parser(prog).parse_args(argv)
    if args.command == "export-lerobot":
        return _export_lerobot(args, f"{prog} export-lerobot")
    return 2


def _export_lerobot(args: argparse.Namespace, name: str) -> int:
    from tqdm import tqdm

    try:
        from pde_storage.lerobot_export import (
            ExportConfig,
            ExportError,
            export_lerobot,
            find_episode_files,
        )
    except ImportError as e:
        print(f"{name}: {e}; install the storage extra: pip install -e '.[storage]'", file=sys.stderr)
        return 2
    config = ExportConfig(
        fps=args.fps,
        vcodec=args.vcodec,
        crf=args.crf,
        gop=args.gop,
        task_prompt=args.task_prompt,
        only_success=args.only_success,
        overwrite=args.overwrite,
        version=args.version,
    )
    try:
        total = len(find_episode_files(args.in_dir))
        with tqdm(total=total, unit="ep", desc="export") as bar:
            report = export_lerobot(args.in_dir, args.out, config, lambda _path: bar.update(1))
    except ExportError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 2
    for line in report.skipped:
        print(f"skipped {line}")
    print(
        f"wrote {report.episodes} episodes, {report.frames} frames, {report.tasks} tasks to {report.out_dir} "
        f"in {report.wall_s:.1f} s"
    )
    return 0
