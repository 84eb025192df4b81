"""Our LeRobotDataset v3.0 export, loaded and trained on by LeRobot 0.6.1 itself.

Run in a Python 3.12 venv with LeRobot 0.6.1 (docs/learner.md says how to build one); it calls this
checkout's own venv for the recording and the export:

    /work/lerobot-venv/bin/python bench/check_lerobot_roundtrip.py [--pde-python .venv/bin/python]

1. ``pde sim record``: expert episodes (two tasks, one episode each, 64x48 cameras), then
   ``pde data export-lerobot`` (defaults: v3.0, AV1) and, for contrast, ``--version v2.1``.
2. ``LeRobotDataset(root=OUT)`` loads the v3.0 export (0.6.1 refuses the v2.1 one: recorded), and
   every item is iterated: state, action, index columns and task equal our parquet rows bit for bit;
   each camera image is the frame our layout puts at the row (decoded with PyAV here, exactly).
3. LeRobot's own statistics code on our rows (``compute_episode_stats``, ``aggregate_stats``)
   against our ``meta/stats.json`` and per-episode stats: the largest differences are recorded.
5. fps (issue 36): LeRobot writes the fixture's episodes (tests/fixtures/lerobot_v30/make_fixture.py)
   at 30 fps and at our 10 Hz control rate with ``LeRobotDataset.create``; our SFT reader
   (``read_lerobot_dataset``, the robot's default rate) refuses the 30 fps one with what to do and
   reads the 10 fps one.
4. Training as π0.5 would normalise: a DataLoader with action chunks (``delta_timestamps``), an ACT
   policy (small, no pretrained backbone) whose state and action normalisation is QUANTILES (q01/q99
   from our stats, as π0.5's), two optimiser steps, finite loss.

Writes bench/results/lerobot_roundtrip.json (versions included). Not part of ``make test``: it needs
the LeRobot venv (about 5.8 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import versions  # bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parent.parent
RESULT = REPO / "bench" / "results" / "lerobot_roundtrip.json"
TASKS = "put_green_container_in_bowl,put_tape_on_top_rack"
IMAGE_SIZE = "64x48"
CHUNK = 10  # action rows per training sample (the expert's chunk length)


def _pde(python: str, *args: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO), MUJOCO_GL=os.environ.get("MUJOCO_GL", "egl"))
    subprocess.run([python, "-m", "pde", *args], check=True, env=env, cwd=REPO)


def _video_frames(path: Path) -> dict[float, np.ndarray]:
    """Every frame of ``path`` (CHW uint8) by the time it is shown (s), decoded with PyAV."""
    import av

    out = {}
    with av.open(str(path)) as f:
        stream = f.streams.video[0]
        for frame in f.decode(stream):
            assert frame.pts is not None and stream.time_base is not None
            out[float(frame.pts * stream.time_base)] = frame.to_ndarray(format="rgb24").transpose(2, 0, 1)
    return out


def _frame_at(frames: dict[float, np.ndarray], t_s: float) -> np.ndarray:
    shown = min(frames, key=lambda t: abs(t - t_s))
    assert abs(shown - t_s) < 1e-4, f"no frame at {t_s} s"
    return frames[shown]


def _iterate(root: Path) -> dict[str, object]:
    """Every item of LeRobot's dataset against our parquet rows and videos."""
    import pyarrow.parquet as pq
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("pde/roundtrip", root=root, video_backend="pyav")
    rows = pq.read_table(root / "data" / "chunk-000" / "file-000.parquet").to_pydict()
    tasks = pq.read_table(root / "meta" / "tasks.parquet").to_pydict()
    task_of = dict(zip(tasks["task_index"], tasks["task"], strict=True))
    episodes = pq.read_table(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    assert len(ds) == len(rows["index"]) == ds.meta.total_frames
    frames_checked = 0
    decoded: dict[Path, dict[float, np.ndarray]] = {}
    for i in range(len(ds)):
        item = ds[i]
        for key in ("observation.state", "action"):
            assert torch.equal(item[key], torch.tensor(rows[key][i], dtype=torch.float32)), (i, key)
        for key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
            assert item[key].item() == rows[key][i], (i, key)
        assert item["task"] == task_of[rows["task_index"][i]]
        ep = episodes[rows["episode_index"][i]]
        for key in ds.meta.video_keys:
            video = root / ds.meta.video_path.format(
                video_key=key,
                chunk_index=ep[f"videos/{key}/chunk_index"],
                file_index=ep[f"videos/{key}/file_index"],
            )
            if video not in decoded:
                decoded[video] = _video_frames(video)
            want = _frame_at(decoded[video], ep[f"videos/{key}/from_timestamp"] + rows["timestamp"][i])
            got = (item[key] * 255).round().to(torch.uint8).numpy()
            assert np.array_equal(got, want), (i, key)
            frames_checked += 1
    return {"items": len(ds), "frames_checked": frames_checked, "episodes": ds.meta.total_episodes}


def _stats(root: Path) -> dict[str, object]:
    """LeRobot's statistics code on our rows, against the stats we wrote (largest |difference|)."""
    import pyarrow.parquet as pq
    from lerobot.datasets.compute_stats import aggregate_stats, compute_episode_stats
    from lerobot.datasets.io_utils import load_stats

    info = json.loads((root / "meta" / "info.json").read_text())
    rows = pq.read_table(root / "data" / "chunk-000" / "file-000.parquet").to_pydict()
    episode_index = np.asarray(rows["episode_index"])
    keys = ["observation.state", "action", "timestamp", "frame_index", "index"]
    theirs = []
    for ep in np.unique(episode_index):
        sel = episode_index == ep
        data = {k: np.asarray(rows[k], dtype=np.float32 if k != "index" else np.int64)[sel] for k in keys}
        data = {k: v if v.ndim > 1 else v.reshape(-1) for k, v in data.items()}
        theirs.append(compute_episode_stats(data, {k: info["features"][k] for k in keys}))
    lerobot_total = aggregate_stats(theirs)
    ours_total = load_stats(root)
    assert ours_total is not None
    diffs: dict[str, dict[str, float]] = {}
    for key in keys:
        for name, value in lerobot_total[key].items():
            d = float(np.max(np.abs(np.asarray(ours_total[key][name], dtype=np.float64) - value)))
            diffs.setdefault(key, {})[name] = d
    per_episode = pq.read_table(root / "meta" / "episodes" / "chunk-000" / "file-000.parquet").to_pylist()
    ep_diff: dict[str, dict[str, float]] = {}
    for ep, stats in zip(per_episode, theirs, strict=True):
        for key in ("observation.state", "action"):
            for name, value in stats[key].items():
                d = float(np.max(np.abs(np.asarray(ep[f"stats/{key}/{name}"]) - value)))
                ep_diff.setdefault(key, {})[name] = max(ep_diff.get(key, {}).get(name, 0.0), d)
    missing = [
        (key, q)
        for key in ours_total
        for q in ("q01", "q10", "q50", "q90", "q99")
        if q not in ours_total[key]
    ]
    assert not missing, missing
    return {
        "max_abs_diff_dataset_stats_vs_lerobot": diffs,
        "max_abs_diff_episode_stats_vs_lerobot": ep_diff,
        "note": "LeRobot keeps float32 data in float32 (std from E[x^2] - E[x]^2, float32 histogram "
        "edges); ours is float64: quantiles may differ by up to one of the 5000 histogram bins",
        "features_with_q01_q99": sorted(ours_total),
    }


def _train(root: Path) -> dict[str, object]:
    """Two optimiser steps of a small ACT on our export, state and action normalised by quantiles."""
    import torch
    from lerobot.configs.types import NormalizationMode
    from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy, make_pre_post_processors

    torch.manual_seed(0)
    meta = LeRobotDatasetMetadata("pde/roundtrip", root=root)
    cfg = ACTConfig(
        chunk_size=CHUNK,
        n_action_steps=CHUNK,
        pretrained_backbone_weights=None,
        dim_model=64,
        dim_feedforward=128,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_heads=4,
        latent_dim=8,
        device="cpu",
        normalization_mapping={
            "VISUAL": NormalizationMode.MEAN_STD,
            "STATE": NormalizationMode.QUANTILES,
            "ACTION": NormalizationMode.QUANTILES,
        },
    )
    policy = make_policy(cfg, ds_meta=meta)
    pre, _ = make_pre_post_processors(cfg, dataset_stats=meta.stats)
    ds = LeRobotDataset(
        "pde/roundtrip",
        root=root,
        delta_timestamps={"action": [i / meta.fps for i in range(CHUNK)]},
        video_backend="pyav",
    )
    loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True, num_workers=0)
    optimiser = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    losses, normalised = [], {}
    for step, batch in enumerate(loader):
        batch = pre(batch)
        normalised = {
            k: [float(batch[k].min()), float(batch[k].max())] for k in ("observation.state", "action")
        }
        loss, _ = policy.forward(batch)
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        losses.append(float(loss))
        if step == 1:
            break
    assert all(np.isfinite(losses)), losses
    return {
        "policy": "act (dim_model 64, no pretrained backbone)",
        "normalization": "QUANTILES for state and action (q01/q99 of our stats)",
        "batch_size": 8,
        "action_chunk": CHUNK,
        "losses": losses,
        "normalised_range_of_last_batch": normalised,
    }


def _fps(work: Path, python: str) -> dict[str, object]:
    """The fixture's episodes written by LeRobot at 30 fps and at 10 fps, read by our SFT reader."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    sys.path.insert(0, str(REPO / "tests" / "fixtures" / "lerobot_v30"))
    import make_fixture as fx  # what LeRobot is given: the suite's fixture episodes

    read = (
        "import sys\n"
        "from learner.lerobot_dataset import DatasetError, read_lerobot_dataset\n"
        "from pde_contract.messages import ActionSpace\n"
        "try:\n"
        "    samples = read_lerobot_dataset(sys.argv[1], 4, ActionSpace.EE_DELTA)\n"
        "    print('read', len(samples.observations), 'samples')\n"
        "except DatasetError as e:\n"
        "    print('refused:', e)\n"
    )
    out: dict[str, object] = {}
    for fps in (30, 10):
        root = work / f"lerobot_written_{fps}fps"
        ds = LeRobotDataset.create(repo_id=f"pde/fps{fps}", fps=fps, features=fx.features(), root=root)
        for index, task in enumerate(fx.TASKS):
            values = fx.episode(index)
            for i in range(fx.LENGTHS[index]):
                ds.add_frame({key: v[i] for key, v in values.items()} | {"task": task})
            ds.save_episode()
        ds.finalize()
        env = dict(os.environ, PYTHONPATH=str(REPO))
        done = subprocess.run(
            [python, "-c", read, str(root)], env=env, cwd=REPO, capture_output=True, text=True
        )
        out[f"written_at_{fps}_fps"] = done.stdout.strip() or done.stderr.strip().splitlines()[-1]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pde-python", default=str(REPO / ".venv" / "bin" / "python"), help="our venv's python")
    p.add_argument("--keep", help="also keep the recording and exports in this folder")
    args = p.parse_args()
    import av
    import datasets
    import lerobot
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        demos, ours, old = work / "demos", work / "lerobot_v30", work / "lerobot_v21"
        record = ["--tasks", TASKS, "--episodes-per-task", "1", "--image-size", IMAGE_SIZE]
        _pde(args.pde_python, "sim", "record", *record, "--out", str(demos))
        _pde(args.pde_python, "data", "export-lerobot", "--in", str(demos), "--out", str(ours))
        _pde(
            args.pde_python,
            "data",
            "export-lerobot",
            "--in",
            str(demos),
            "--out",
            str(old),
            "--version",
            "v2.1",
        )
        try:
            LeRobotDataset("pde/old", root=old)
            v21 = "loaded"
        except Exception as e:  # what LeRobot 0.6.1 says of the older layout
            v21 = f"refused: {type(e).__name__}"
        result: dict[str, object] = {
            "what": "our LeRobotDataset v3.0 export loaded, iterated and trained on by LeRobot itself",
            "command": " ".join([sys.executable, "bench/check_lerobot_roundtrip.py", *sys.argv[1:]]),
            "versions": versions(lerobot=lerobot, torch=torch, datasets=datasets, av=av),
            "input": {"tasks": TASKS.split(","), "episodes_per_task": 1, "image_size": IMAGE_SIZE},
            "iterate": _iterate(ours),
            "stats": _stats(ours),
            "train": _train(ours),
            "lerobot_on_our_v21_export": v21,
            "sft_reader_on_lerobot_datasets_by_fps": _fps(work, args.pde_python),
        }
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
