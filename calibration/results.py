"""What the tool writes: JSON files a lab keeps next to its robot configuration.

Intrinsics load straight into ``pde_contract.messages.CameraIntrinsics``; a hand-eye file holds the
camera's pose (``T_tcp_camera`` for a wrist camera, ``T_base_camera`` for a fixed one) and how well
every method fitted the samples.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Literal, TypeVar

import msgspec
import numpy as np

from calibration.board import BoardSpec
from pde_contract.files import atomic_write_bytes
from pde_contract.messages import CameraIntrinsics

FORMAT_VERSION = 1
Mount = Literal["hand", "base"]  # eye-in-hand (wrist camera) / eye-to-hand (fixed camera)


class CalibrationFileError(ValueError):
    """A calibration file is missing or not what was expected; the message says which and why."""


def utc_now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class ViewError(msgspec.Struct, kw_only=True):
    name: str
    rms_px: float
    used: bool
    reason: str = ""  # why it was rejected


class IntrinsicsCalibration(msgspec.Struct, kw_only=True):
    kind: Literal["intrinsics"] = "intrinsics"
    format_version: int = FORMAT_VERSION
    camera: str
    serial: str = ""
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    distortion: list[float]  # k1 k2 p1 p2 k3 (OpenCV / Brown-Conrady)
    rms_px: float  # over the views used
    std_fx_fy_cx_cy: list[float]  # one-sigma estimates from the fit
    views: list[ViewError]
    board: BoardSpec
    coverage_fraction: float  # share of a 8x6 grid of image cells that held a corner
    warnings: list[str] = []
    created_utc: str = msgspec.field(default_factory=utc_now_iso)

    def to_camera_intrinsics(self) -> CameraIntrinsics:
        return CameraIntrinsics(
            width=self.width,
            height=self.height,
            fx=self.fx,
            fy=self.fy,
            cx=self.cx,
            cy=self.cy,
            distortion=list(self.distortion),
        )

    @property
    def n_views_used(self) -> int:
        return sum(view.used for view in self.views)


class MethodResult(msgspec.Struct, kw_only=True):
    method: str  # "tsai", "park", "horaud", "andreff", "daniilidis", "shah", "li"
    # Empty and None when the method failed (``error`` says why).
    transform: list[list[float]]  # the camera pose (see HandEyeCalibration.frame)
    rotation_rms_deg: float | None
    rotation_max_deg: float | None
    translation_rms_mm: float | None
    translation_max_mm: float | None
    reprojection_rms_px: float | None  # None too when no images were given
    error: str = ""


class HandEyeCalibration(msgspec.Struct, kw_only=True):
    kind: Literal["handeye"] = "handeye"
    format_version: int = FORMAT_VERSION
    camera: str
    mount: Mount
    frame: str  # "T_tcp_camera" (mount hand) or "T_base_camera" (mount base)
    method: str  # the method with the smallest residuals, whose transform is below
    transform: list[list[float]]  # 4x4, metres
    position_m: list[float]
    quat_xyzw: list[float]
    # The board's pose found alongside: T_base_board (mount hand) or T_tcp_board (mount base).
    board_frame: str
    board_transform: list[list[float]]
    methods: list[MethodResult]
    n_samples: int
    rotation_span_deg: float  # largest orientation difference between two samples
    samples_used: list[str]
    samples_rejected: dict[str, str]  # sample -> reason
    intrinsics_source: str
    board: BoardSpec
    warnings: list[str] = []
    created_utc: str = msgspec.field(default_factory=utc_now_iso)

    def matrix(self) -> np.ndarray:
        return np.asarray(self.transform, dtype=np.float64)


class SampleRecord(msgspec.Struct, kw_only=True):
    """One operator-confirmed pose: the TCP in the base frame and one image per camera."""

    index: int
    tcp_position_m: list[float]
    tcp_quat_xyzw: list[float]
    images: dict[str, str]  # camera name -> image file, relative to the samples file
    time_s: float = 0.0


class SampleSet(msgspec.Struct, kw_only=True):
    kind: Literal["samples"] = "samples"
    format_version: int = FORMAT_VERSION
    factory_intrinsics: dict[str, CameraIntrinsics] = {}  # what each camera reported
    samples: list[SampleRecord] = []
    created_utc: str = msgspec.field(default_factory=utc_now_iso)


S = TypeVar("S", bound=msgspec.Struct)


def save_json(obj: msgspec.Struct, path: Path) -> None:
    # never leave a half-written calibration behind
    atomic_write_bytes(path, msgspec.json.format(msgspec.json.encode(obj), indent=2) + b"\n")


def load_json(path: Path, kind: type[S]) -> S:
    if not path.is_file():
        raise CalibrationFileError(f"{path}: no such file")
    try:
        return msgspec.json.decode(path.read_bytes(), type=kind)
    except msgspec.DecodeError as e:
        raise CalibrationFileError(f"{path} is not a valid {kind.__name__} file: {e}") from e


def load_intrinsics(path: Path) -> tuple[CameraIntrinsics, str]:
    """Intrinsics from either this tool's result or a bare CameraIntrinsics JSON (e.g. the
    factory values ``collect`` saved); returns them and a description of where they came from."""
    if not path.is_file():
        raise CalibrationFileError(f"{path}: no such file")
    raw = msgspec.json.decode(path.read_bytes())
    if isinstance(raw, dict) and raw.get("kind") == "intrinsics":
        result = load_json(path, IntrinsicsCalibration)
        return result.to_camera_intrinsics(), f"{path} (calibrated {result.created_utc})"
    if isinstance(raw, dict) and raw.get("type") == "CameraIntrinsics":
        return msgspec.json.decode(path.read_bytes(), type=CameraIntrinsics), f"{path} (CameraIntrinsics)"
    raise CalibrationFileError(
        f"{path} holds neither an intrinsics calibration (kind 'intrinsics') nor a CameraIntrinsics "
        "message; run `pde calibrate intrinsics` to make one"
    )
