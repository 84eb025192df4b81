"""``pde calibrate collect``: save camera images and the TCP pose at operator-confirmed poses.

Safe by default: the tool never moves the robot. The operator puts the arm in each pose (hand
guiding in Desk, or any other client), lets it come to rest and presses Enter; the sample is kept
only when two observations 0.3 s apart agree (robot at rest, so image and pose belong together).
With ``--plan`` it instead drives a small built-in set of poses around home (tilts up to 29°
about a pivot ``--pivot-m`` below the TCP on the tool axis, so a board there stays in view), in
slow steps through the robot server's safety layer, asking before every move.

Everything is written to the output directory at once: one JPEG per camera per sample (the
server's own bytes, not re-encoded) and ``samples.json`` (re-written atomically after every sample;
an existing one is extended, never overwritten).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import cv2
import numpy as np

from calibration.board import BoardSpec, detect
from calibration.handeye import pose_diversity
from calibration.poses import make_transform, pose_from_position_quat, rotation_angle_deg, rotation_axis
from calibration.results import SampleRecord, SampleSet, load_json, save_json
from pde_contract.client import RobotClient
from pde_contract.messages import ActionChunk, ActionSpace, Observation

SAMPLES_FILE = "samples.json"
STILL_TRANSLATION_M = 0.0005
STILL_ROTATION_DEG = 0.05
STILL_JOINT_SPEED_RAD_S = 0.01
# Planned poses: rotation vectors (rad, base frame) applied to the home orientation, each about a
# pivot on the tool axis below the TCP, so a board there stays in a wrist camera's view.
PLAN_ROTVECS_RAD: tuple[tuple[float, float, float], ...] = (
    (0.0, 0.0, 0.0),
    (0.3, 0.0, 0.0),
    (-0.3, 0.0, 0.0),
    (0.0, 0.3, 0.0),
    (0.0, -0.3, 0.0),
    (0.0, 0.0, 0.5),
    (0.0, 0.0, -0.5),
    (0.2, 0.2, 0.3),
    (-0.2, 0.2, -0.3),
    (0.2, -0.2, -0.3),
    (-0.2, -0.2, 0.3),
)
STEP_TRANSLATION_M = 0.005
STEP_ROTATION_RAD = 0.03


class CollectError(RuntimeError):
    pass


def _tcp(obs: Observation) -> np.ndarray:
    return pose_from_position_quat(obs.state.ee_position_m, obs.state.ee_quat_xyzw)


def wait_at_rest(client: RobotClient, settle_s: float = 0.3, timeout_s: float = 2.0) -> Observation | None:
    """An observation taken with the robot at rest, or None when it keeps moving."""
    first = client.latest_observation(timeout_s)
    time.sleep(settle_s)
    second = client.latest_observation(timeout_s)
    a, b = _tcp(first), _tcp(second)
    moved_m = float(np.linalg.norm(a[:3, 3] - b[:3, 3]))
    turned_deg = rotation_angle_deg(a[:3, :3].T @ b[:3, :3])
    speed = float(np.max(np.abs(second.state.joint_velocities_rad_s)))
    if moved_m > STILL_TRANSLATION_M or turned_deg > STILL_ROTATION_DEG or speed > STILL_JOINT_SPEED_RAD_S:
        return None
    # The pictures must be from after the robot came to rest, not from the way there.
    if any(frame.capture_time_s < first.publish_time_s - 0.05 for frame in second.cameras):
        return None
    return second


def save_sample(
    out_dir: Path, sample_set: SampleSet, obs: Observation, cameras: Sequence[str]
) -> SampleRecord:
    index = max((s.index for s in sample_set.samples), default=-1) + 1
    images: dict[str, str] = {}
    frames = {frame.name: frame for frame in obs.cameras}
    missing = [c for c in cameras if c not in frames]
    if missing:
        raise CollectError(
            f"observation has no frame from {missing} (has {sorted(frames)}); check the cameras"
        )
    for camera in cameras:
        frame = frames[camera]
        name = f"{camera}_{index:03d}.jpg"
        (out_dir / name).write_bytes(frame.jpeg)
        images[camera] = name
        if frame.intrinsics is not None:
            sample_set.factory_intrinsics[camera] = frame.intrinsics
    record = SampleRecord(
        index=index,
        tcp_position_m=[float(v) for v in obs.state.ee_position_m],
        tcp_quat_xyzw=[float(v) for v in obs.state.ee_quat_xyzw],
        images=images,
        time_s=obs.publish_time_s,
    )
    sample_set.samples.append(record)
    save_json(sample_set, out_dir / SAMPLES_FILE)
    return record


def board_report(out_dir: Path, record: SampleRecord, board: BoardSpec) -> dict[str, bool]:
    found = {}
    for camera, name in record.images.items():
        image = cv2.imread(str(out_dir / name), cv2.IMREAD_GRAYSCALE)
        found[camera] = image is not None and detect(image, board) is not None
    return found


def diversity_report(sample_set: SampleSet) -> str:
    poses = [
        pose_from_position_quat(np.array(s.tcp_position_m), np.array(s.tcp_quat_xyzw))
        for s in sample_set.samples
    ]
    diversity = pose_diversity(poses)
    return (
        f"{diversity.n_samples} sample(s); orientations span {diversity.rotation_span_deg:.1f}° "
        f"(want ≥ 15°), rotation-axis spread {diversity.axis_spread:.2f} (want ≥ 0.05, "
        "i.e. tilts about two or more axes)"
    )


def _obs_timeout_s(client: RobotClient) -> float:
    """How long to wait for an observation: the client's reply timeout, at least 2 s."""
    return max(2.0, client.timeout_s)


def move_by(
    client: RobotClient,
    obs: Observation,
    T_from: np.ndarray,
    T_to: np.ndarray,
    seq: int,
    timeout_s: float = 30.0,
    resumes: int = 3,
) -> int:
    """Drive the TCP from ``T_from`` to ``T_to`` in small ``ee_delta`` steps and wait until done.
    Returns the seq of the last chunk sent. A move the server's watchdog cut short (a heartbeat came
    late: a loaded machine or network) is resumed from where the arm stopped, up to ``resumes``
    times; otherwise a sample would be taken at an unplanned pose, maybe with the board out of view."""
    for _ in range(resumes + 1):
        trips = client.status().counters.watchdog_trips
        _move_once(client, obs, T_from, T_to, seq, timeout_s)
        if client.status().counters.watchdog_trips == trips:
            return seq
        obs = client.latest_observation(_obs_timeout_s(client))
        T_from, seq = _tcp(obs), seq + 1
    client.stop()
    raise CollectError(
        f"the server's watchdog stopped the move {resumes + 1} times (heartbeats arrive late): check "
        "the network to the robot server and the load of this machine, then confirm the pose again"
    )


def _move_once(
    client: RobotClient, obs: Observation, T_from: np.ndarray, T_to: np.ndarray, seq: int, timeout_s: float
) -> None:
    rotation_delta = T_to[:3, :3] @ T_from[:3, :3].T  # base-frame rotation, as ee_delta expects
    angle_rad = np.radians(rotation_angle_deg(rotation_delta))
    rotvec = rotation_axis(rotation_delta) * angle_rad
    translation = T_to[:3, 3] - T_from[:3, 3]
    steps = max(
        1,
        int(np.ceil(np.linalg.norm(translation) / STEP_TRANSLATION_M)),
        int(np.ceil(angle_rad / STEP_ROTATION_RAD)),
    )
    row = np.concatenate([translation / steps, rotvec / steps, [obs.state.gripper_width_m]])
    info = client.info or client.connect()
    chunk = ActionChunk(
        seq=seq,
        episode_id="calibration",
        action_space=ActionSpace.EE_DELTA,
        actions=np.tile(row, (steps, 1)),
        control_rate_hz=info.control_rate_hz,
        sent_time_s=time.time(),
    )
    client.submit_chunk(chunk)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            latest = client.latest_observation(_obs_timeout_s(client))
            if latest.last_chunk_seq == seq and latest.steps_remaining == 0:
                return
    except KeyboardInterrupt:
        client.stop()  # Ctrl-C during a planned move halts the arm, not just this program
        raise
    client.stop()
    raise CollectError(f"the move did not finish within {timeout_s:.0f} s; stopped the robot")


def collect(
    client: RobotClient,
    out_dir: Path,
    board: BoardSpec,
    cameras: Sequence[str] | None = None,
    plan: bool = False,
    reset_first: bool = False,
    pivot_m: float = 0.3,
    ask: Callable[[str], str] = input,
    say: Callable[[str], None] = print,
    max_samples: int = 100,
) -> SampleSet:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / SAMPLES_FILE
    sample_set = load_json(path, SampleSet) if path.exists() else SampleSet()
    if sample_set.samples:
        say(f"extending {path} ({len(sample_set.samples)} samples already there)")
    info = client.connect()
    cameras = list(cameras or info.cameras)
    unknown = [c for c in cameras if c not in info.cameras]
    if unknown:
        raise CollectError(f"camera(s) {unknown} not served; the server has {info.cameras}")
    say(f"connected to {info.server_name} ({info.backend}); cameras {cameras}; saving to {out_dir}")
    client.start_heartbeat()
    try:
        if reset_first or plan:
            prompt = "Enter: move the robot home (reset) — make sure the workspace is clear; q: quit > "
            if ask(prompt).strip() == "q":
                return sample_set
            client.reset()
        home = _tcp(client.latest_observation(_obs_timeout_s(client)))
        current = home
        targets = plan_targets(home, pivot_m)
        k = 0
        seq = int(time.time() * 1000)  # strictly above any chunk this client sent before
        while len(sample_set.samples) < max_samples:
            if plan:
                if k >= len(targets):
                    break
                answer = ask(
                    f"Enter: move to planned pose {k + 1}/{len(targets)}; s: skip; q: finish > "
                ).strip()
                if answer == "q":
                    break
                if answer == "s":
                    k += 1
                    continue
                seq += 1
                seq = move_by(
                    client, client.latest_observation(_obs_timeout_s(client)), current, targets[k], seq
                )
                current = targets[k]
                k += 1
            else:
                answer = ask(
                    f"Pose {len(sample_set.samples) + 1}: put the robot in a new pose with the board "
                    "in view, let go, then Enter (q: finish) > "
                ).strip()
                if answer == "q":
                    break
            # A planned move ends at rest within a few seconds; a hand-guided one is confirmed again.
            obs = None
            for _ in range(10 if plan else 1):
                obs = wait_at_rest(client, timeout_s=_obs_timeout_s(client))
                if obs is not None:
                    break
            if obs is None:
                say(
                    "the robot is still moving (or the pictures are older than the pose); not saved — "
                    "hold it still and confirm again"
                )
                continue
            record = save_sample(out_dir, sample_set, obs, cameras)
            found = board_report(out_dir, record, board)
            seen = ", ".join(f"{c}: {'board found' if ok else 'NO BOARD'}" for c, ok in found.items())
            say(f"saved sample {record.index} ({seen}). {diversity_report(sample_set)}")
    finally:
        client.stop_heartbeat()
    say(f"{len(sample_set.samples)} samples in {path}")
    return sample_set


def plan_targets(home: np.ndarray, pivot_m: float) -> list[np.ndarray]:
    """T_base_tcp of the planned poses: the point ``pivot_m`` along the home tool axis stays put."""
    pivot = home[:3, 3] + pivot_m * home[:3, 2]
    targets = []
    for rotvec in PLAN_ROTVECS_RAD:
        rotation, _ = cv2.Rodrigues(np.asarray(rotvec, dtype=np.float64).reshape(3, 1))
        orientation = rotation @ home[:3, :3]
        targets.append(make_transform(orientation, pivot - pivot_m * orientation[:, 2]))
    return targets
