"""SFT samples from a LeRobotDataset v2.0/v2.1 on disk (what ``pde_storage.lerobot_export`` writes, or
any dataset with the FR3's 15-entry ``observation.state`` and our action columns).

Each sample is a dataset row's observation (state + every ``observation.images.*`` video frame,
decoded with PyAV) and the next ``chunk_len`` action rows of its episode (past the end the robot
holds, as ``learner.sft.action_windows`` does). Rows with ``chunk_row == 0`` only when the dataset
has that column (ours: the rows whose observation was taken at that instant), else every
``stride``-th row. Frames are re-encoded as JPEG into ``Observation`` messages, so every policy
preprocesses them exactly as it does the robot's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import av
import cv2
import numpy as np
import pyarrow.parquet as pq

from pde_contract.messages import STATE_VECTOR_NAMES, ActionSpace, CameraFrame, Observation, RobotState
from pde_storage.lerobot_export import ACTION_NAMES

IMAGE_PREFIX = "observation.images."
# The layouts read here: meta/tasks.jsonl and one parquet file and one video per episode (v2.1 only
# added per-episode statistics to v2.0, which are not read). LeRobot >= 0.4 writes v3.0: several
# episodes per file, meta/tasks.parquet, meta/episodes/.
VERSIONS = ("v2.0", "v2.1")


class DatasetError(ValueError):
    """The dataset cannot feed SFT; the message says what was wrong."""


@dataclass
class DatasetSamples:
    observations: list[Observation]
    actions: np.ndarray  # [N, chunk_len, D] action-space units
    prompts: list[str]  # the episode's task text
    tasks: list[str]  # the same (a LeRobotDataset has no separate task id)


def _hold(rows: np.ndarray, action_space: ActionSpace) -> np.ndarray:
    """What the robot does after the last row: ee_delta holds still (zero deltas, last gripper
    width), joint_abs keeps the last target."""
    if action_space == ActionSpace.EE_DELTA:
        hold = np.zeros(rows.shape[1])
        hold[-1] = rows[-1, -1]
        return hold
    return rows[-1]


def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def _state(vec: np.ndarray, t: float) -> RobotState:
    v = np.asarray(vec, dtype=np.float64)
    return RobotState(
        joint_positions_rad=v[8:15],
        joint_velocities_rad_s=np.zeros(7),
        ee_position_m=v[0:3],
        ee_quat_xyzw=v[3:7],
        gripper_width_m=float(v[7]),
        robot_time_s=t,
    )


def read_lerobot_dataset(
    root: str | Path, chunk_len: int, action_space: ActionSpace, stride: int = 1
) -> DatasetSamples:
    root = Path(root)
    info_path = root / "meta" / "info.json"
    if not info_path.is_file():
        raise DatasetError(f"{root} is not a LeRobotDataset v2.x (no meta/info.json)")
    info = json.loads(info_path.read_text())
    found = info.get("codebase_version")
    if found not in VERSIONS:
        raise DatasetError(
            f"{root} is a LeRobotDataset {found or 'with no codebase_version'}; SFT reads the "
            f"{' and '.join(VERSIONS)} layouts (meta/tasks.jsonl, one parquet file and one video per "
            "episode). The lab's own episodes: `pde data export-lerobot` writes v2.1. A hub dataset "
            "that LeRobot converted to v3.0 keeps its v2.1 files under the git tag v2.1: `hf download "
            "REPO --repo-type dataset --revision v2.1 --local-dir DIR`"
        )
    features = info.get("features", {})
    state_ft, action_ft = features.get("observation.state"), features.get("action")
    if state_ft is None or list(state_ft.get("shape", [])) != [len(STATE_VECTOR_NAMES)]:
        raise DatasetError(
            f"{root}: observation.state must be the FR3's {len(STATE_VECTOR_NAMES)} entries "
            f"{list(STATE_VECTOR_NAMES)} (as `pde data export-lerobot` writes), got {state_ft}"
        )
    want = ACTION_NAMES[action_space]
    names = action_ft.get("names") if action_ft else None
    if names != want:
        raise DatasetError(
            f"{root}: the action columns are {names}; the policy acts in {action_space.value} = {want}"
        )
    cameras = [k.removeprefix(IMAGE_PREFIX) for k, v in features.items() if v.get("dtype") == "video"]
    tasks = {
        int(r["task_index"]): r["task"]
        for r in map(json.loads, (root / "meta" / "tasks.jsonl").read_text().splitlines())
        if r
    }
    chunks_size = int(info.get("chunks_size", 1000))
    out = DatasetSamples([], np.zeros((0, chunk_len, len(want))), [], [])
    windows: list[np.ndarray] = []
    for ep in range(int(info["total_episodes"])):
        chunk = ep // chunks_size
        table = pq.read_table(
            root / info["data_path"].format(episode_chunk=chunk, episode_index=ep)
        ).to_pydict()
        actions = np.asarray(table["action"], dtype=np.float64)
        states = np.asarray(table["observation.state"], dtype=np.float64)
        frames = {
            cam: _frames(
                root
                / info["video_path"].format(
                    episode_chunk=chunk, video_key=IMAGE_PREFIX + cam, episode_index=ep
                )
            )
            for cam in cameras
        }
        padded = np.concatenate([actions, np.tile(_hold(actions, action_space), (chunk_len, 1))])
        rows = (
            [i for i, r in enumerate(table["chunk_row"]) if r == 0]
            if "chunk_row" in table
            else list(range(0, len(actions), stride))
        )
        for i in rows:
            t = float(table["timestamp"][i])
            cams = []
            for cam, video in frames.items():
                rgb = video[int(table["frame_index"][i])]
                ok, jpeg = cv2.imencode(".jpg", rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 95])
                if not ok:
                    raise DatasetError(f"{root}: episode {ep} frame {i} of {cam} does not encode as JPEG")
                h, w = rgb.shape[:2]
                cams.append(
                    CameraFrame(
                        name=cam, jpeg=jpeg.tobytes(), width=w, height=h, capture_time_s=t, frame_index=i
                    )
                )
            out.observations.append(
                Observation(seq=i, publish_time_s=t, state=_state(states[i], t), cameras=cams)
            )
            windows.append(padded[i : i + chunk_len])
            task = tasks[int(table["task_index"][i])]
            out.prompts.append(task)
            out.tasks.append(task)
    if not windows:
        raise DatasetError(f"{root} holds no rows")
    out.actions = np.stack(windows)
    return out
