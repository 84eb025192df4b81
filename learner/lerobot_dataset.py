"""SFT samples from a LeRobotDataset on disk, v3.0 (LeRobot >= 0.4, 0.6.1 included: several
episodes per parquet file and per video, ``meta/episodes/``, ``meta/tasks.parquet``) or v2.0/v2.1 (one
parquet file and one video per episode, ``meta/tasks.jsonl``): what ``pde_storage.lerobot_export``
writes (the FR3's 15-entry ``observation.state``, our action columns), or a lab's own dataset of
another layout read through a mapping file (``LeRobotMapping``, ``--lerobot-map``).

Each sample is a dataset row's observation (state + camera frames: video frames decoded with PyAV,
or, in a dataset recorded with ``use_videos=False``, the images in its parquet rows) and the next
``chunk_len`` action rows of its episode (past the end the robot holds, as
``learner.sft.action_windows`` does). Every ``stride``-th row; in our exports of episodes that kept
only each chunk's first observation (``chunk_row`` column, ``rows_with_own_observation`` below the
row count in ``meta/pde_episodes.jsonl``), the rows with ``chunk_row == 0`` only.
``LeRobotSource`` reads one episode at a time (SFT streams large datasets from it).
A row's video frame is the one shown at the row's ``timestamp`` (plus, in v3.0, the episode's
``from_timestamp`` in its shared video file), within LeRobot's ``tolerance_s``, as LeRobot looks it
up. Frames are re-encoded as JPEG into ``Observation`` messages, so every policy preprocesses them
exactly as it does the robot's.
"""

from __future__ import annotations

import json
import string
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from pde_contract.messages import (
    ACTION_DIMS,
    STATE_VECTOR_NAMES,
    ActionSpace,
    CameraFrame,
    Observation,
    RobotState,
)
from pde_contract.settings import DEFAULT_CONTROL_RATE_HZ
from pde_storage.lerobot_export import ACTION_NAMES

IMAGE_PREFIX = "observation.images."
# The layouts read here. v2.0 and v2.1 differ only in per-episode statistics (not read); v3.0 is
# what LeRobot 0.4 and later (0.6.1 included) record and read.
VERSIONS = ("v2.0", "v2.1", "v3.0")
# LeRobot's default LeRobotDataset(tolerance_s=...): a row's video frame must be this close in time.
FRAME_TOLERANCE_S = 1e-4


class DatasetError(ValueError):
    """The dataset cannot feed SFT; the message says what was wrong."""


class Columns(BaseModel):
    """Entries of one dataset feature, in the order given: by LeRobot ``names`` (meta/info.json),
    by ``index`` (0-based), by ``range`` ([start, stop), Python slice), or the whole feature when none
    of them is given. ``scale`` multiplies them (e.g. 0.001 for a gripper width in mm); nothing else
    is converted. In ``[state]`` a ``constant`` may stand instead of a feature: the dataset lacks
    those entries and the policy sees these fixed values in SFT (the robot reports real ones later)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    feature: str | None = None
    names: list[str] | None = None
    index: list[int] | None = None
    range: tuple[int, int] | None = None
    scale: float = 1.0
    constant: list[float] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Columns:
        picks = [k for k in ("names", "index", "range") if getattr(self, k) is not None]
        if (self.feature is None) == (self.constant is None):
            raise ValueError("give either `feature` (a dataset feature) or `constant` (fixed values)")
        if self.constant is not None and (picks or self.scale != 1.0):
            raise ValueError("`constant` takes no names, index, range or scale")
        if len(picks) > 1:
            raise ValueError(f"pick the entries with one of names, index, range; got {picks}")
        return self


class StateMap(BaseModel):
    """Where each part of our robot state comes from (``STATE_VECTOR_NAMES``). Units: metres for
    ``ee_position_m`` (TCP in the robot base frame) and ``gripper_width_m`` (finger opening),
    a unit quaternion x, y, z, w for ``ee_quat_xyzw``, radians for ``joint_positions_rad`` (7)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ee_position_m: Columns
    ee_quat_xyzw: Columns
    gripper_width_m: Columns
    joint_positions_rad: Columns


STATE_PARTS: dict[str, int] = {
    "ee_position_m": 3,
    "ee_quat_xyzw": 4,
    "gripper_width_m": 1,
    "joint_positions_rad": 7,
}  # StateMap's fields in STATE_VECTOR_NAMES order, with their lengths


class ActionMap(BaseModel):
    """Our action columns, concatenated in order from ``columns``. ``space``: ``ee_delta`` = dx, dy,
    dz (m), drx, dry, drz (rotation vector, rad, robot base frame; each row applied to the previous
    commanded target), gripper width (m) — 7 columns; ``joint_abs`` = 7 absolute joint targets (rad),
    gripper width (m) — 8 columns. The policy's action space must be this one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    space: str
    columns: list[Columns]

    @field_validator("space")
    @classmethod
    def _known_space(cls, v: str) -> str:
        spaces = [s.value for s in ActionSpace]
        if v not in spaces:
            raise ValueError(f"the robot has no action space {v!r}; it acts in one of {spaces}")
        return v

    @field_validator("columns")
    @classmethod
    def _from_features(cls, v: list[Columns]) -> list[Columns]:
        if any(c.feature is None for c in v):
            raise ValueError("action columns come from dataset features (`constant` is for state only)")
        return v


class LeRobotMapping(BaseModel):
    """How a LeRobotDataset of another layout feeds our state, actions and cameras (a TOML or JSON
    file; example: docs/lerobot_map.example.toml). ``cameras``: our camera name -> the dataset's
    video feature key (e.g. ``wrist = "observation.images.wrist"``); only these videos are read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: StateMap
    action: ActionMap
    cameras: dict[str, str]


def load_mapping(path: str | Path) -> LeRobotMapping:
    """``path`` (.toml or .json) as a checked mapping; DatasetError says what is wrong in it."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise DatasetError(f"cannot read the LeRobot mapping {path}: {e}") from None
    try:
        raw = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
        return LeRobotMapping.model_validate(raw)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"{path}: not valid {path.suffix.lstrip('.') or 'JSON'}: {e}") from None
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in e.errors()
        )
        raise DatasetError(
            f"{path}: {problems} (the schema: learner/lerobot_dataset.py LeRobotMapping, example "
            "docs/lerobot_map.example.toml)"
        ) from None


def own_layout_mapping(video_keys: Sequence[str], action_space: ActionSpace) -> LeRobotMapping:
    """What ``pde data export-lerobot`` writes, as a mapping: what is read without one."""
    state = "observation.state"
    return LeRobotMapping(
        state=StateMap(
            ee_position_m=Columns(feature=state, range=(0, 3)),
            ee_quat_xyzw=Columns(feature=state, range=(3, 7)),
            gripper_width_m=Columns(feature=state, range=(7, 8)),
            joint_positions_rad=Columns(feature=state, range=(8, 15)),
        ),
        action=ActionMap(space=action_space.value, columns=[Columns(feature="action")]),
        cameras={k.removeprefix(IMAGE_PREFIX): k for k in video_keys},
    )


@dataclass(frozen=True)
class _Take:
    """Resolved ``Columns``: which entries of which parquet column, times ``scale``."""

    feature: str | None
    index: np.ndarray
    scale: float
    constant: np.ndarray | None

    def read(self, table: dict[str, np.ndarray], n_rows: int) -> np.ndarray:
        if self.constant is not None:
            return np.tile(self.constant, (n_rows, 1))
        assert self.feature is not None
        cols = table[self.feature][:, self.index]
        return cols if self.scale == 1.0 else cols * self.scale


def _feature_names(ft: dict[str, Any]) -> list[str] | None:
    """LeRobot writes ``names`` as a list, or (older v2.0 datasets) a one-key dict of one list."""
    names = ft.get("names")
    if isinstance(names, dict) and len(names) == 1:
        names = next(iter(names.values()))
    return [str(n) for n in names] if isinstance(names, list) else None


def _resolve(cols: Columns, want: int | None, what: str, features: dict[str, Any], root: Path) -> _Take:
    if cols.constant is not None:
        if want is not None and len(cols.constant) != want:
            raise DatasetError(
                f"mapping {what}: `constant` has {len(cols.constant)} values, {what} has {want}"
            )
        return _Take(None, np.zeros(0, dtype=np.int64), 1.0, np.asarray(cols.constant, dtype=np.float64))
    assert cols.feature is not None
    vectors = {k: v for k, v in features.items() if v.get("dtype") not in ("video", "image")}
    ft = vectors.get(cols.feature)
    if ft is None:
        listed = ", ".join(f"{k} {list(v.get('shape', []))}" for k, v in vectors.items())
        raise DatasetError(
            f"mapping {what}: {root} has no feature {cols.feature!r}; its features: {listed}. "
            "Name one of these in the mapping file."
        )
    shape = [int(s) for s in ft.get("shape", [])]
    if len(shape) != 1:
        raise DatasetError(f"mapping {what}: {cols.feature} has shape {shape}; a flat vector is needed")
    size, names = shape[0], _feature_names(ft)
    if cols.names is not None:
        if names is None:
            raise DatasetError(
                f"mapping {what}: {cols.feature} has no entry names in meta/info.json; "
                f"pick its {size} entries by `index` or `range` instead"
            )
        missing = [n for n in cols.names if n not in names]
        if missing:
            raise DatasetError(f"mapping {what}: {cols.feature} has no entries {missing}; its names: {names}")
        index = [names.index(n) for n in cols.names]
    elif cols.index is not None:
        index = list(cols.index)
    elif cols.range is not None:
        index = list(range(*cols.range))
    else:
        index = list(range(size))
    bad = [i for i in index if not 0 <= i < size]
    if bad or not index:
        raise DatasetError(
            f"mapping {what}: {cols.feature} has {size} entries{f' {names}' if names else ''}; "
            f"the mapping picks {index or 'none'}"
        )
    if want is not None and len(index) != want:
        raise DatasetError(
            f"mapping {what}: takes {len(index)} entries of {cols.feature} ({index}); {what} has {want}"
        )
    return _Take(cols.feature, np.asarray(index, dtype=np.int64), cols.scale, None)


@dataclass(frozen=True)
class _Plan:
    state: list[_Take]  # in STATE_PARTS order
    action: list[_Take]
    videos: dict[str, str]  # our camera -> dataset video (or image) key
    images: frozenset[str] = frozenset()  # the keys stored as images in the parquet rows


def _plan(
    mapping: LeRobotMapping,
    action_space: ActionSpace,
    features: dict[str, Any],
    root: Path,
    cameras: Sequence[str] | None,
) -> _Plan:
    """Check ``mapping`` against the dataset and the policy before anything is decoded."""
    if mapping.action.space != action_space.value:
        raise DatasetError(
            f"mapping action.space is {mapping.action.space}; the policy acts in {action_space.value} "
            f"({ACTION_NAMES[action_space]}). Map the dataset's actions to {action_space.value} or "
            "start from a policy of that action space."
        )
    state = [
        _resolve(getattr(mapping.state, part), n, f"state.{part}", features, root)
        for part, n in STATE_PARTS.items()
    ]
    action = [
        _resolve(c, None, f"action.columns[{i}]", features, root)
        for i, c in enumerate(mapping.action.columns)
    ]
    width = sum(len(t.index) for t in action)
    if width != ACTION_DIMS[action_space]:
        raise DatasetError(
            f"mapping action.columns give {width} columns; {action_space.value} has "
            f"{ACTION_DIMS[action_space]}: {ACTION_NAMES[action_space]}"
        )
    # Camera features: videos (LeRobot's default) or images in the parquet rows (use_videos=False).
    pictures = sorted(k for k, v in features.items() if v.get("dtype") in ("video", "image"))
    for ours, key in mapping.cameras.items():
        if key not in pictures:
            raise DatasetError(
                f"mapping cameras.{ours}: {root} has no video or image feature {key!r}; its cameras: "
                f"{pictures}"
            )
    lacking = [c for c in cameras or () if c not in mapping.cameras]
    if lacking:
        raise DatasetError(
            f"the policy reads cameras {list(cameras or ())}; the mapping gives {list(mapping.cameras)}. "
            f"Add {lacking} under [cameras] (our camera = dataset video key)."
        )
    images = frozenset(k for k in mapping.cameras.values() if features[k].get("dtype") == "image")
    return _Plan(state, action, dict(mapping.cameras), images)


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


def video_frames_at(path: Path, times_s: Sequence[float], where: str) -> list[np.ndarray]:
    """The RGB frames of the video at ``path`` shown at ``times_s`` (seconds into the file), each the
    decoded frame nearest in time, no further than FRAME_TOLERANCE_S (LeRobot's rule: seek to the
    keyframe before the first, decode on past the last)."""
    if not path.is_file():
        raise DatasetError(f"{where}: the video {path} is missing; the dataset is incomplete")
    first, last = min(times_s), max(times_s)
    decoded: list[np.ndarray] = []
    shown_s: list[float] = []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        assert stream.time_base is not None
        container.seek(max(0, round(first / stream.time_base) - 1), backward=True, stream=stream)
        for frame in container.decode(stream):
            if frame.pts is None:
                continue
            t = float(frame.pts * stream.time_base)
            if t < first - FRAME_TOLERANCE_S:
                continue
            decoded.append(frame.to_ndarray(format="rgb24"))
            shown_s.append(t)
            if t >= last:
                break
    if not decoded:
        raise DatasetError(f"{where}: {path} has no frame between {first:.4f} s and {last:.4f} s")
    shown = np.asarray(shown_s)
    out = []
    for t in times_s:
        i = int(np.argmin(np.abs(shown - t)))
        if abs(shown[i] - t) >= FRAME_TOLERANCE_S:
            raise DatasetError(
                f"{where}: {path} shows no frame at {t:.4f} s (nearest {shown[i]:.4f} s, tolerance "
                f"{FRAME_TOLERANCE_S} s); the row timestamps and the video disagree: re-encode the video "
                "at the dataset's fps or drop this episode"
            )
        out.append(decoded[i])
    return out


def _state(v: np.ndarray, t: float) -> RobotState:
    """``v``: our 15 state entries (STATE_VECTOR_NAMES order)."""
    return RobotState(
        joint_positions_rad=v[8:15],
        joint_velocities_rad_s=np.zeros(7),
        ee_position_m=v[0:3],
        ee_quat_xyzw=v[3:7],
        gripper_width_m=float(v[7]),
        robot_time_s=t,
    )


def _check_own_layout(root: Path, features: dict[str, Any], action_space: ActionSpace) -> None:
    state_ft, action_ft = features.get("observation.state"), features.get("action")
    if state_ft is None or list(state_ft.get("shape", [])) != [len(STATE_VECTOR_NAMES)]:
        raise DatasetError(
            f"{root}: observation.state must be the FR3's {len(STATE_VECTOR_NAMES)} entries "
            f"{list(STATE_VECTOR_NAMES)} (as `pde data export-lerobot` writes), got {state_ft}; "
            "a dataset of another layout is read with a mapping file (--lerobot-map)"
        )
    want = ACTION_NAMES[action_space]
    names = action_ft.get("names") if action_ft else None
    if names != want:
        raise DatasetError(
            f"{root}: the action columns are {names}; the policy acts in {action_space.value} = {want} "
            "(a dataset of another layout is read with a mapping file, --lerobot-map)"
        )


def _columns(table: dict[str, list[Any]], feature: str, size: int, where: str) -> np.ndarray:
    cols = np.asarray(table[feature], dtype=np.float64).reshape(len(table[feature]), -1)
    if cols.shape[1] != size:
        raise DatasetError(
            f"{where}: {feature} rows have {cols.shape[1]} entries, meta/info.json says {size}"
        )
    return cols


def _read_info(root: Path) -> dict[str, Any]:
    info_path = root / "meta" / "info.json"
    if not info_path.is_file():
        raise DatasetError(
            f"{root} is not a LeRobotDataset (no meta/info.json); pass the dataset root, the folder "
            "that holds meta/ and data/"
        )
    info: dict[str, Any] = json.loads(info_path.read_text())
    found = info.get("codebase_version")
    if found not in VERSIONS:
        newer = isinstance(found, str) and found > "v3.0" and found.startswith("v")
        raise DatasetError(
            f"{root} is a LeRobotDataset {found or 'with no codebase_version'}; SFT reads the "
            f"{', '.join(VERSIONS)} layouts. "
            + (
                "It was written by a LeRobot newer than 0.6.1: write it again with LeRobot 0.6.1, or "
                "download the hub dataset's v3.0 files (`hf download REPO --repo-type dataset "
                "--revision v3.0 --local-dir DIR`)."
                if newer
                else "Convert it with LeRobot 0.6.1 (`python -m lerobot.scripts.convert_dataset_v21_to_v30"
                " --repo-id=REPO`, after LeRobot 0.3's v2.0 -> v2.1 conversion for older ones); the lab's "
                "own episodes: `pde data export-lerobot` writes v3.0."
            )
        )
    return info


def check_fps(root: Path, info: dict[str, Any], control_rate_hz: float) -> None:
    """A dataset row is one control tick in SFT (a chunk is the next ``chunk_len`` rows): the
    dataset's fps must be the robot's control rate. Refused, not resampled: keeping every k-th row is
    exact only for absolute targets at a whole ratio; ee_delta steps would have to be composed
    (rotation vectors do not add) and a wrong resampling would teach wrong speeds without a word."""
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not fps > 0:
        raise DatasetError(
            f"{root}/meta/info.json gives no fps ({fps!r}); LeRobot writes one: write it again"
        )
    if abs(float(fps) - control_rate_hz) > 1e-6 * control_rate_hz:
        ratio = float(fps) / control_rate_hz
        whole = ratio > 1 and abs(ratio - round(ratio)) < 1e-9
        keep = f" (one frame in {round(ratio)}, with absolute targets)" if whole else ""
        raise DatasetError(
            f"{root} was recorded at {fps} fps (meta/info.json), the robot acts at {control_rate_hz:g} Hz: "
            f"SFT takes one row per control tick, so the robot would move at {1 / ratio:.3g} times the "
            f"demonstrations' speed (a {round(fps)}-row chunk spans 1 s of them, "
            f"{round(fps) / control_rate_hz:.3g} s on the robot). Write the dataset again at "
            f"{control_rate_hz:g} fps{keep}, or run the robot server at {fps} Hz "
            f"(PDE_ROBOT_CONTROL_RATE_HZ={fps}) and train with --control-rate-hz {fps}"
        )


@dataclass(frozen=True)
class _EpisodeRef:
    """Where one episode's rows and frames are; nothing read yet."""

    index: int
    data_path: Path
    rows: tuple[int, int] | None  # v3.0: [from, to) of the ``index`` column in a shared file; v2: all
    videos: dict[str, tuple[Path, float]]  # video key -> (file, the episode's start in it, s)
    where: str  # for messages


def _check_templates(root: Path, info: dict[str, Any]) -> None:
    """The path templates must name the fields of the layout ``codebase_version`` says."""
    v3 = info["codebase_version"] == "v3.0"
    fields = (
        {"chunk_index", "file_index", "video_key"} if v3 else {"episode_chunk", "episode_index", "video_key"}
    )
    for key in ("data_path", "video_path"):
        used = {f for _, f, _, _ in string.Formatter().parse(str(info.get(key) or "")) if f}
        if used - fields:
            raise DatasetError(
                f"{root}/meta/info.json: {key} {info.get(key)!r} is not a {info['codebase_version']} "
                f"template (it may use {sorted(fields)}); the files and codebase_version disagree: "
                "fix codebase_version or write the dataset again"
            )


def _episodes_v2(root: Path, info: dict[str, Any], video_keys: Sequence[str]) -> list[_EpisodeRef]:
    """v2.0/v2.1: data/chunk-XXX/episode_XXXXXX.parquet, one video per episode and camera."""
    chunks_size = int(info.get("chunks_size", 1000))
    out = []
    for ep in range(int(info["total_episodes"])):
        chunk = ep // chunks_size
        data_path = root / info["data_path"].format(episode_chunk=chunk, episode_index=ep)
        if not data_path.is_file():
            raise DatasetError(
                f"{root}: episode {ep}'s rows {data_path} are missing; the dataset is incomplete"
            )
        videos = {
            key: (root / info["video_path"].format(episode_chunk=chunk, video_key=key, episode_index=ep), 0.0)
            for key in video_keys
        }
        out.append(_EpisodeRef(ep, data_path, None, videos, str(data_path)))
    return out


def _episodes_v3(root: Path, info: dict[str, Any], video_keys: Sequence[str]) -> list[_EpisodeRef]:
    """v3.0: meta/episodes/chunk-XXX/file-XXX.parquet says where each episode's rows (data file and
    index range) and frames (video file and from_timestamp) are; a file holds several episodes."""
    files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    if not files:
        raise DatasetError(
            f"{root}: a v3.0 dataset without meta/episodes/chunk-*/file-*.parquet; it is incomplete"
        )
    want = ["episode_index", "data/chunk_index", "data/file_index", "dataset_from_index", "dataset_to_index"]
    for key in video_keys:
        want += [f"videos/{key}/chunk_index", f"videos/{key}/file_index", f"videos/{key}/from_timestamp"]
    episodes: list[dict[str, Any]] = []
    for path in files:
        table = pq.read_table(path)
        missing = [c for c in want if c not in table.column_names]
        if missing:
            raise DatasetError(f"{path}: the episode index lacks the columns {missing}")
        episodes += table.select(want).to_pylist()
    episodes.sort(key=lambda e: int(e["episode_index"]))
    out = []
    for e in episodes:
        data_path = root / info["data_path"].format(
            chunk_index=e["data/chunk_index"], file_index=e["data/file_index"]
        )
        if not data_path.is_file():
            raise DatasetError(
                f"{root}: episode {e['episode_index']}'s rows {data_path} are missing; "
                "the dataset is incomplete"
            )
        videos = {
            key: (
                root
                / info["video_path"].format(
                    video_key=key,
                    chunk_index=e[f"videos/{key}/chunk_index"],
                    file_index=e[f"videos/{key}/file_index"],
                ),
                float(e[f"videos/{key}/from_timestamp"]),
            )
            for key in video_keys
        }
        rows = (int(e["dataset_from_index"]), int(e["dataset_to_index"]))
        where = f"{data_path} episode {e['episode_index']}"
        out.append(_EpisodeRef(int(e["episode_index"]), data_path, rows, videos, where))
    return out


def _read_rows(ref: _EpisodeRef, columns: Sequence[str]) -> dict[str, list[Any]]:
    """The episode's rows (only ``columns``), in order. A v3.0 file holds several episodes: only
    the row groups whose ``index`` statistics overlap this one's range are read."""
    # ParquetFile, not read_table: the dataset API takes a dotted name for a nested field
    pf = pq.ParquetFile(ref.data_path)
    missing = sorted(set(columns) - set(pf.schema_arrow.names))
    if missing:
        raise DatasetError(
            f"{ref.where}: meta/info.json lists {missing} but the parquet file has no such column "
            f"(it has {pf.schema_arrow.names}); the dataset is inconsistent: write it again"
        )
    if ref.rows is None:
        return pf.read(columns=list(columns)).to_pydict()
    lo, hi = ref.rows
    groups = []
    for g in range(pf.num_row_groups):
        group = pf.metadata.row_group(g)
        leaf = next(
            (group.column(j) for j in range(group.num_columns) if group.column(j).path_in_schema == "index"),
            None,
        )
        st = None if leaf is None else leaf.statistics
        if st is None or not st.has_min_max or (st.max >= lo and st.min < hi):
            groups.append(g)
    table = pf.read_row_groups(groups, columns=sorted({*columns, "index"}))
    index = np.asarray(table.column("index"))
    start, stop = int(np.searchsorted(index, lo)), int(np.searchsorted(index, hi))
    if not np.array_equal(index[start:stop], np.arange(lo, hi)):
        raise DatasetError(
            f"{ref.data_path}: episode {ref.index} should have the rows index {lo}..{hi - 1}, "
            "in order; the file does not hold them so"
        )
    return table.slice(start, stop - start).to_pydict()


def _own_observation_episodes(root: Path) -> set[int]:
    """Episodes of ``pde data export-lerobot`` whose every row has its own observation
    (``meta/pde_episodes.jsonl``; episode format 3): all their rows are samples, not only each
    chunk's first."""
    path = root / "meta" / "pde_episodes.jsonl"
    if not path.is_file():
        return set()
    out = set()
    for line in path.read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        own = row.get("rows_with_own_observation")
        if own is not None and own > 0 and own == row.get("rows"):
            out.add(int(row["episode_index"]))
    return out


def _tasks(root: Path, version: str) -> dict[int, str]:
    if version != "v3.0":
        return {
            int(r["task_index"]): r["task"]
            for r in map(json.loads, (root / "meta" / "tasks.jsonl").read_text().splitlines())
            if r
        }
    # LeRobot writes a pandas frame: task_index, indexed by the task text (stored as column "task")
    path = root / "meta" / "tasks.parquet"
    if not path.is_file():
        raise DatasetError(f"{root}: a v3.0 dataset without meta/tasks.parquet; it is incomplete")
    table = pq.read_table(path)
    texts = [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    if "task_index" not in table.column_names or not texts:
        raise DatasetError(
            f"{root}/meta/tasks.parquet: needs a task_index column and the task texts; it has "
            f"{table.column_names}"
        )
    return dict(zip(table["task_index"].to_pylist(), table[texts[0]].to_pylist(), strict=True))


def _picture(value: Any, where: str) -> np.ndarray:
    """An RGB image from a parquet image cell (``datasets``' Image feature: {"bytes", "path"})."""
    data = value.get("bytes") if isinstance(value, dict) else value
    if not data:
        raise DatasetError(f"{where}: an image cell without bytes (a path-only image is not read)")
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise DatasetError(f"{where}: an image cell that does not decode (PNG or JPEG expected)")
    return np.ascontiguousarray(bgr[:, :, ::-1])


@dataclass
class EpisodeVectors:
    """An episode's samples without their images: enough for normalisation statistics."""

    states: np.ndarray  # [n, 15] raw FR3 state at each sample
    actions: np.ndarray  # [n, chunk_len, D] action-space units


class LeRobotSource:
    """A LeRobotDataset's SFT samples, one episode at a time: ``samples(i)`` decodes episode ``i``
    only, so SFT can stream a dataset larger than memory (learner/sft_stream.py)."""

    def __init__(
        self,
        root: str | Path,
        chunk_len: int,
        action_space: ActionSpace,
        stride: int = 1,
        mapping: LeRobotMapping | None = None,
        cameras: Sequence[str] | None = None,
        control_rate_hz: float = DEFAULT_CONTROL_RATE_HZ,
    ) -> None:
        """``mapping``: how a dataset of another layout feeds ours (None: our export layout);
        ``cameras``: the policy's, checked against the mapping's before anything is decoded;
        ``control_rate_hz``: the robot's, which the dataset's fps must be (:func:`check_fps`);
        ``stride``: every stride-th row becomes a sample (rows whose observation is stale, in our
        exports before format 3, are left out whatever the stride)."""
        if stride < 1:
            raise DatasetError(f"stride {stride}: take every 1st row or more")
        root = Path(root)
        info = _read_info(root)
        check_fps(root, info, control_rate_hz)
        features: dict[str, Any] = info.get("features", {})
        if mapping is None:
            _check_own_layout(root, features, action_space)
            pictures = [k for k, v in features.items() if v.get("dtype") in ("video", "image")]
            plan = _plan(own_layout_mapping(pictures, action_space), action_space, features, root, None)
        else:
            plan = _plan(mapping, action_space, features, root, cameras)
        version = info["codebase_version"]
        _check_templates(root, info)
        video_keys = sorted(set(plan.videos.values()) - plan.images)
        self.root, self.chunk_len, self.action_space, self.stride = root, chunk_len, action_space, stride
        self.features, self.plan = features, plan
        self.episodes = (_episodes_v3 if version == "v3.0" else _episodes_v2)(root, info, video_keys)
        self.tasks = _tasks(root, version)
        self.own_rows = _own_observation_episodes(root)
        self._vector_features = sorted({t.feature for t in plan.state + plan.action if t.feature is not None})

    def __len__(self) -> int:
        return len(self.episodes)

    def _vectors(
        self, ref: _EpisodeRef, table: dict[str, list[Any]]
    ) -> tuple[list[int], np.ndarray, np.ndarray]:
        """The sample rows, every row's state and every sample row's action window."""
        n_rows = len(table["timestamp"])
        cols = {
            f: _columns(table, f, int(self.features[f]["shape"][0]), ref.where) for f in self._vector_features
        }
        states = np.concatenate([t.read(cols, n_rows) for t in self.plan.state], axis=1)
        actions = np.concatenate([t.read(cols, n_rows) for t in self.plan.action], axis=1)
        if not n_rows:
            raise DatasetError(f"{ref.where}: the episode has no rows")
        padded = np.concatenate([actions, np.tile(_hold(actions, self.action_space), (self.chunk_len, 1))])
        rows = (
            [i for i, r in enumerate(table["chunk_row"]) if r == 0]
            if "chunk_row" in table and ref.index not in self.own_rows
            else list(range(0, n_rows, self.stride))
        )
        windows = [padded[i : i + self.chunk_len] for i in rows]
        width = ACTION_DIMS[self.action_space]
        return rows, states, np.stack(windows) if windows else np.zeros((0, self.chunk_len, width))

    def _base_columns(self) -> list[str]:
        cols = ["timestamp", "task_index", *self._vector_features]
        return cols + (["chunk_row"] if "chunk_row" in self.features else [])

    def vectors(self, i: int) -> EpisodeVectors:
        ref = self.episodes[i]
        rows, states, windows = self._vectors(ref, _read_rows(ref, self._base_columns()))
        return EpisodeVectors(states[rows], windows)

    def samples(self, i: int) -> DatasetSamples:
        ref = self.episodes[i]
        table = _read_rows(ref, self._base_columns() + sorted(self.plan.images))
        rows, states, windows = self._vectors(ref, table)
        frames: dict[str, list[np.ndarray]] = {}
        for cam, key in self.plan.videos.items():
            where = f"{ref.where}, {key}"
            if key in self.plan.images:
                frames[cam] = [_picture(table[key][k], f"{where} row {k}") for k in rows]
                continue
            path, start_s = ref.videos[key]
            times = [start_s + float(table["timestamp"][k]) for k in rows]
            frames[cam] = video_frames_at(path, times, where)
        out = DatasetSamples([], windows, [], [])
        for n, k in enumerate(rows):
            t = float(table["timestamp"][k])
            cams = []
            for cam, pictures in frames.items():
                rgb = pictures[n]
                ok, jpeg = cv2.imencode(".jpg", rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 95])
                if not ok:
                    raise DatasetError(
                        f"{self.root}: episode {ref.index} frame {k} of {cam} does not encode as JPEG"
                    )
                h, w = rgb.shape[:2]
                cams.append(
                    CameraFrame(
                        name=cam, jpeg=jpeg.tobytes(), width=w, height=h, capture_time_s=t, frame_index=k
                    )
                )
            out.observations.append(
                Observation(seq=k, publish_time_s=t, state=_state(states[k], t), cameras=cams)
            )
            task = self.tasks[int(table["task_index"][k])]
            out.prompts.append(task)
            out.tasks.append(task)
        return out


def read_lerobot_dataset(
    root: str | Path, chunk_len: int, action_space: ActionSpace, **options: Any
) -> DatasetSamples:
    """Every sample of the dataset in memory (``LeRobotSource`` says which, ``options`` are its
    stride, mapping, cameras and control rate; SFT streams a large dataset from the source instead)."""
    source = LeRobotSource(root, chunk_len, action_space, **options)
    out = DatasetSamples([], np.zeros((0, chunk_len, ACTION_DIMS[action_space])), [], [])
    windows: list[np.ndarray] = []
    for i in range(len(source)):
        ep = source.samples(i)
        out.observations += ep.observations
        out.prompts += ep.prompts
        out.tasks += ep.tasks
        windows.append(ep.actions)
    if not out.observations:
        raise DatasetError(f"{source.root} holds no rows")
    out.actions = np.concatenate(windows)
    return out
