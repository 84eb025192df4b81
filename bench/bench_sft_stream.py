"""Peak memory of SFT streaming a LeRobotDataset too large to hold: a synthetic v3.0 dataset of
--episodes episodes x --seconds s at --fps with two 224x224 cameras (every row its own frames; written
once into --dataset by `pde data export-lerobot`'s code, h264), then `pde learner sft --lerobot-dataset`
(the small policy at --image-size 224, where every decoded sample holds 2 x 3 x 224 x 224 bytes) run
as a child process whose process tree (the trainer and its DataLoader workers) is sampled every
0.2 s for its resident memory (RSS, summed: pages the workers share with the trainer count twice,
so an upper bound) and its proportional share (PSS).

    .venv/bin/python bench/bench_sft_stream.py [--dataset /tmp/sft_stream_ds] [--memory-budget-mb 1024]

writes bench/results/sft_stream.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pde_contract.episodes import ChunkRecord, EpisodeFile, write_episode
from pde_contract.messages import ActionSpace, CameraFrame, Observation, RobotState
from pde_storage.lerobot_export import ExportConfig, export_lerobot

RESULT = Path(__file__).resolve().parent / "results" / "sft_stream.json"
SIZE_PX = 224
CAMERAS = ("external", "wrist")
ROWS_PER_CHUNK = 10
PROMPT = "put the green container in the bowl"


def _frame(episode: int, row: int, camera: int) -> bytes:
    """A distinct frame per row: a gradient and a square that moves with the row."""
    img = np.zeros((SIZE_PX, SIZE_PX, 3), np.uint8)
    img[:, :, 0] = np.linspace(0, 255, SIZE_PX, dtype=np.uint8)[None, :]
    img[:, :, 1] = (37 * episode + 90 * camera) % 256
    x = (row * 3) % (SIZE_PX - 40)
    img[60:100, x : x + 40] = (255, 255, 255)
    ok, data = cv2.imencode(".jpg", img[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return data.tobytes()


def _observation(episode: int, row: int, fps: int) -> Observation:
    t = row / fps
    state = RobotState(
        joint_positions_rad=np.full(7, 0.01 * row),
        joint_velocities_rad_s=np.zeros(7),
        ee_position_m=np.array([0.4 + 1e-4 * row, 0.0, 0.3]),
        ee_quat_xyzw=np.array([0.0, 0.0, 0.0, 1.0]),
        gripper_width_m=0.08,
        robot_time_s=t,
    )
    cams = [
        CameraFrame(
            name=n,
            jpeg=_frame(episode, row, k),
            width=SIZE_PX,
            height=SIZE_PX,
            capture_time_s=t,
            frame_index=row,
        )
        for k, n in enumerate(CAMERAS)
    ]
    return Observation(seq=row, publish_time_s=t, state=state, cameras=cams, tick=row)


def _episode(episode: int, rows: int, fps: int) -> EpisodeFile:
    rng = np.random.default_rng(episode)
    chunks = []
    for start in range(0, rows, ROWS_PER_CHUNK):
        n = min(ROWS_PER_CHUNK, rows - start)
        chunks.append(
            ChunkRecord(
                observation=_observation(episode, start, fps),
                actions=rng.normal(0.0, 0.005, (n, 7)).astype(np.float32),
                row_observations={r: _observation(episode, start + r, fps) for r in range(1, n)},
            )
        )
    return EpisodeFile(
        episode_id=f"synthetic-{episode}",
        task="put_green_container_in_bowl",
        canonical_prompt=PROMPT,
        rollout_prompt=PROMPT,
        action_space=ActionSpace.EE_DELTA,
        control_rate_hz=float(fps),
        chunks=chunks,
        success=True,
        source="synthetic",
    )


def make_dataset(out: Path, episodes: int, rows: int, fps: int) -> float:
    """The dataset at ``out`` (kept when it exists); seconds it took."""
    if (out / "meta" / "info.json").is_file():
        return 0.0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for e in range(episodes):
            write_episode(Path(tmp) / f"{e:04d}.episode", _episode(e, rows, fps))
        export_lerobot(tmp, out, ExportConfig(vcodec="h264"))
    return time.perf_counter() - t0


def _tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def _kb(pid: int, path: str, field: str) -> int:
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_sft(dataset: Path, args: argparse.Namespace, work: Path) -> dict[str, object]:
    cmd = [
        sys.executable, "-m", "pde", "learner", "sft",
        "--lerobot-dataset", str(dataset),
        "--checkpoints", str(work / "ck"),
        "--image-size", str(SIZE_PX),
        "--steps", str(args.steps),
        "--batch-size", str(args.batch_size),
        "--memory-budget-mb", str(args.memory_budget_mb),
        "--loader-workers", str(args.loader_workers),
        "--control-rate-hz", str(args.fps),  # a robot at the dataset's rate (one row a tick)
        "--device", "cpu",
        "--force",
    ]  # fmt: skip
    env = {**os.environ, "PDE_LEARNER_DATA_DIR": str(work / "data"), "OMP_NUM_THREADS": "2"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    peak_rss = peak_pss = peak_procs = 0
    while proc.poll() is None:
        pids = _tree(proc.pid)
        peak_rss = max(peak_rss, sum(_kb(p, "status", "VmRSS:") for p in pids))
        peak_pss = max(peak_pss, sum(_kb(p, "smaps_rollup", "Pss:") for p in pids))
        peak_procs = max(peak_procs, len(pids))
        time.sleep(0.2)
    output = proc.stdout.read() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"SFT failed ({proc.returncode}):\n{output[-3000:]}")
    metrics = json.loads(output[output.rindex("{\n") :])
    return {
        "wall_s": round(time.perf_counter() - t0, 1),
        "peak_rss_tree_mb": round(peak_rss / 1024),
        "peak_pss_tree_mb": round(peak_pss / 1024),
        "processes": peak_procs,
        "streamed": bool(metrics["sft_streamed"]),
        "samples": int(metrics["sft_samples"]),
        "episodes": int(metrics["sft_episodes"]),
        "loss_first_last": [round(metrics["sft_loss_first"], 4), round(metrics["sft_loss_last"], 4)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", type=Path, default=Path(tempfile.gettempdir()) / "sft_stream_ds")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--memory-budget-mb", type=float, default=1024.0)
    ap.add_argument("--loader-workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    make_s = make_dataset(args.dataset, args.episodes, args.seconds * args.fps, args.fps)
    with tempfile.TemporaryDirectory() as work:
        run = run_sft(args.dataset, args, Path(work))
    per_sample = len(CAMERAS) * 3 * SIZE_PX * SIZE_PX
    result = {
        "bench": "sft_stream",
        "dataset": {
            "episodes": args.episodes,
            "seconds": args.seconds,
            "fps": args.fps,
            "cameras": list(CAMERAS),
            "image_px": SIZE_PX,
            "rows": args.episodes * args.seconds * args.fps,
            "made_s": round(make_s, 1),
        },
        "held_in_memory_would_need_mb": round(args.episodes * args.seconds * args.fps * per_sample / 2**20),
        "memory_budget_mb": args.memory_budget_mb,
        "loader_workers": args.loader_workers,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "sft": run,
        "limit_mb": 4096,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "loadavg_1m": os.getloadavg()[0],
        },
        "command": "python bench/bench_sft_stream.py "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "dataset"),
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
