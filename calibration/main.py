"""``pde calibrate``: camera intrinsics and hand-eye calibration for the lab's RealSense cameras.

    pde calibrate collect --out calib/session1 [--plan]          # images + TCP poses, Enter per pose
    pde calibrate intrinsics --images calib/session1 --camera wrist
    pde calibrate handeye --samples calib/session1/samples.json --camera wrist \\
        --intrinsics calib/session1/intrinsics_wrist.json         # mount hand (wrist camera)
    pde calibrate handeye --samples calib/session2/samples.json --camera external --mount base

Exit status: 0 done, 2 bad input or a calibration the data cannot support (the message says what
to add or fix), 1 the robot server failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cv2
import numpy as np

from calibration import handeye, intrinsics
from calibration.board import BoardError, BoardSpec
from calibration.results import (
    CalibrationFileError,
    HandEyeCalibration,
    IntrinsicsCalibration,
    Mount,
    SampleSet,
    load_intrinsics,
    load_json,
    save_json,
)


def _add_board_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--board",
        default="9x6",
        help="inner corners COLSxROWS; a checkerboard needs one odd, one even (default 9x6)",
    )
    p.add_argument("--square-mm", type=float, default=25.0, help="printed square size, measured (default 25)")
    p.add_argument("--charuco", action="store_true", help="a ChArUco board (partial views count)")
    p.add_argument(
        "--marker-mm", type=float, default=0.0, help="ChArUco marker side (default 75%% of the square)"
    )
    p.add_argument(
        "--dictionary", default="DICT_5X5_100", help="ChArUco ArUco dictionary (default DICT_5X5_100)"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pde calibrate", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("intrinsics", help="intrinsics from saved images of the checkerboard")
    p.add_argument("--images", type=Path, required=True, help="directory of images (png/jpg)")
    p.add_argument("--camera", default="camera", help="camera name, e.g. wrist or external")
    p.add_argument("--glob", help="image name pattern (default: CAMERA_* next to a samples.json, else all)")
    p.add_argument("--serial", default="", help="camera serial number, stored in the result")
    p.add_argument("--factory", type=Path, help="CameraIntrinsics JSON to compare with")
    p.add_argument("--out", type=Path, help="result JSON (default IMAGES/intrinsics_CAMERA.json)")
    p.add_argument("--fit-k3", action="store_true", help="also fit k3 (only with views reaching the corners)")
    p.add_argument(
        "--max-view-error-px", type=float, default=1.0, help="reject views above this (and 3x median)"
    )
    p.add_argument("--min-views", type=int, default=6)
    _add_board_args(p)

    p = sub.add_parser("handeye", help="camera pose from collected samples (robot pose + image)")
    p.add_argument("--samples", type=Path, required=True, help="samples.json written by `collect`")
    p.add_argument("--camera", required=True, help="camera name in the samples, e.g. wrist")
    p.add_argument(
        "--mount",
        choices=["hand", "base"],
        help="hand: camera on the gripper (eye-in-hand); base: fixed camera, board on the gripper "
        "(default: hand for a camera named wrist, else base)",
    )
    p.add_argument(
        "--intrinsics", type=Path, help="intrinsics JSON (default: the factory values in the samples)"
    )
    p.add_argument("--out", type=Path, help="result JSON (default next to the samples: handeye_CAMERA.json)")
    p.add_argument("--min-rotation-span-deg", type=float, default=15.0)
    _add_board_args(p)

    p = sub.add_parser("board", help="write the board as an image to print at a given resolution")
    p.add_argument("--out", type=Path, required=True, help="PNG file")
    p.add_argument("--dpi", type=int, default=300, help="printer resolution (print at 100%%, no scaling)")
    _add_board_args(p)

    p = sub.add_parser("selfcheck", help="run the whole tool on simulated sessions with a known answer")
    p.add_argument("--views", type=int, default=12, help="views per session (default 12)")
    p.add_argument("--image-noise", type=float, default=0.0, help="Gaussian image noise, grey levels")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="keep the sessions here (default: a temporary directory)")
    _add_board_args(p)

    p = sub.add_parser("collect", help="save images and TCP poses at operator-confirmed poses")
    p.add_argument("--endpoint", default="tcp://127.0.0.1:5556", help="robot server command endpoint")
    p.add_argument("--out", type=Path, required=True, help="session directory (extended if it exists)")
    p.add_argument("--cameras", help="comma-separated camera names (default: all the server has)")
    p.add_argument(
        "--plan", action="store_true", help="drive a built-in set of poses around home, asking first"
    )
    p.add_argument("--pivot-m", type=float, default=0.3, help="--plan tilts about this point below the TCP")
    p.add_argument("--reset", action="store_true", help="move home first")
    p.add_argument("--timeout-s", type=float, default=2.0, help="robot server reply timeout")
    _add_board_args(p)
    return parser


def _fail(message: str) -> int:
    print(f"pde calibrate: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        board = BoardSpec.parse(args.board, args.square_mm, args.charuco, args.marker_mm, args.dictionary)
        if args.command == "board":
            return _board(args, board)
        if args.command == "selfcheck":
            return _selfcheck(args, board)
        if args.command == "intrinsics":
            return _intrinsics(args, board)
        if args.command == "handeye":
            return _handeye(args, board)
        return _collect(args, board)
    except (BoardError, CalibrationFileError, intrinsics.IntrinsicsError, handeye.HandEyeError) as e:
        return _fail(str(e))


def _board(args: argparse.Namespace, board: BoardSpec) -> int:
    px_per_square = round(board.square_m / 0.0254 * args.dpi)
    if px_per_square < 20:
        return _fail(f"{args.dpi} dpi gives {px_per_square} px per square; use a higher --dpi")
    image = board.image(px_per_square, margin_px=px_per_square)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(args.out), image):
        return _fail(f"cannot write {args.out}")
    width_mm = image.shape[1] / args.dpi * 25.4
    height_mm = image.shape[0] / args.dpi * 25.4
    print(
        f"wrote {args.out}: {board.describe()}, {image.shape[1]}x{image.shape[0]} px = "
        f"{width_mm:.0f}x{height_mm:.0f} mm at {args.dpi} dpi. Print at 100% (no fit-to-page), glue it "
        "flat and measure a square: pass that as --square-mm."
    )
    return 0


def _selfcheck(args: argparse.Namespace, board: BoardSpec) -> int:
    import tempfile

    from calibration import selfcheck

    with tempfile.TemporaryDirectory(prefix="pde-calibrate-") as tmp:
        directory: Path = args.out or Path(tmp)
        report = selfcheck.run(directory, board, args.views, args.image_noise, args.seed)
    print(
        f"{board.describe()}, {report.views} views per session, image noise {report.image_noise} "
        "grey levels\n"
        f"intrinsics: fx {report.fx_error_percent:+.3f}%, fy {report.fy_error_percent:+.3f}%, "
        f"cx {report.cx_error_px:+.2f} px, cy {report.cy_error_px:+.2f} px, rays within "
        f"{report.max_ray_displacement_px:.2f} px of the truth; fit RMS {report.intrinsics_rms_px:.3f} px"
    )
    for check in report.handeye:
        print(
            f"hand-eye ({check.mount}): {check.error_mm:.3f} mm, {check.error_deg:.4f}° from the truth "
            f"by {check.method}; reprojection {check.reprojection_rms_px or float('nan'):.3f} px"
        )
    limits = (
        f"fx/fy ≤ {selfcheck.MAX_FOCAL_ERROR_PERCENT}%, rays ≤ {selfcheck.MAX_RAY_DISPLACEMENT_PX} px, "
        f"hand-eye ≤ {selfcheck.MAX_HANDEYE_ERROR_MM} mm / {selfcheck.MAX_HANDEYE_ERROR_DEG}°"
    )
    print(("PASSED" if report.passed else "FAILED") + f" ({limits})")
    return 0 if report.passed else 1


def _intrinsics(args: argparse.Namespace, board: BoardSpec) -> int:
    directory: Path = args.images
    samples_path = directory / "samples.json"
    pattern = args.glob or (f"{args.camera}_*" if samples_path.is_file() else "*")
    paths = [p for p in intrinsics.list_images(directory) if p.match(pattern)]
    if not paths:
        hint = ""
        if samples_path.is_file():
            cameras = sorted(
                {c for sample in load_json(samples_path, SampleSet).samples for c in sample.images}
            )
            hint = f"; this session has cameras {cameras}: pass one with --camera"
        return _fail(f"no images matching {pattern!r} in {directory}{hint}")
    detections, missed = intrinsics.detect_in_files(paths, board)
    result = intrinsics.calibrate(
        detections,
        board,
        camera=args.camera,
        serial=args.serial,
        missed=missed,
        min_views=args.min_views,
        max_view_rms_px=args.max_view_error_px,
        fit_k3=args.fit_k3,
    )
    factory = None
    if args.factory is not None:
        factory, _ = load_intrinsics(args.factory)
    elif samples_path.is_file():
        factory = load_json(samples_path, SampleSet).factory_intrinsics.get(args.camera)
    out: Path = args.out or directory / f"intrinsics_{args.camera}.json"
    save_json(result, out)
    _print_intrinsics(result)
    if factory is not None:
        c = intrinsics.compare(result.to_camera_intrinsics(), factory)
        print(
            f"vs factory: fx {c.d_fx_px:+.2f} px ({c.d_fx_percent:+.2f}%), fy {c.d_fy_px:+.2f} px "
            f"({c.d_fy_percent:+.2f}%), cx {c.d_cx_px:+.2f} px, cy {c.d_cy_px:+.2f} px; same ray lands "
            f"{c.mean_displacement_px:.2f} px apart on average, {c.max_displacement_px:.2f} px at most"
        )
    print(f"wrote {out}")
    return 0


def _print_intrinsics(result: IntrinsicsCalibration) -> None:
    for view in result.views:
        mark = "ok " if view.used else "-- "
        print(f"  {mark}{view.name:<28} {view.rms_px:7.3f} px {view.reason}")
    std = result.std_fx_fy_cx_cy
    print(
        f"{result.camera} {result.width}x{result.height}: fx {result.fx:.2f}±{std[0]:.2f} "
        f"fy {result.fy:.2f}±{std[1]:.2f} cx {result.cx:.2f}±{std[2]:.2f} cy {result.cy:.2f}±{std[3]:.2f} "
        f"dist {np.round(result.distortion, 5).tolist()}; RMS {result.rms_px:.3f} px over "
        f"{result.n_views_used} views; coverage {result.coverage_fraction:.0%}"
    )
    for warning in result.warnings:
        print(f"warning: {warning}")


def _handeye(args: argparse.Namespace, board: BoardSpec) -> int:
    sample_set = load_json(args.samples, SampleSet)
    mount: Mount = args.mount or ("hand" if args.camera == "wrist" else "base")
    if args.intrinsics is not None:
        camera_intrinsics, source = load_intrinsics(args.intrinsics)
    elif args.camera in sample_set.factory_intrinsics:
        camera_intrinsics = sample_set.factory_intrinsics[args.camera]
        source = "factory values recorded by collect"
        print(
            "warning: using the camera's factory intrinsics; run `pde calibrate intrinsics` and pass "
            "--intrinsics for a better result"
        )
    else:
        return _fail(
            f"no intrinsics for camera {args.camera!r}: pass --intrinsics FILE (from "
            "`pde calibrate intrinsics`); the samples file holds factory values for "
            f"{sorted(sample_set.factory_intrinsics) or 'no camera'}"
        )
    result = handeye.calibrate_samples(
        args.samples,
        sample_set,
        args.camera,
        mount,
        board,
        camera_intrinsics,
        source,
        min_rotation_span_deg=args.min_rotation_span_deg,
    )
    out: Path = args.out or args.samples.parent / f"handeye_{args.camera}.json"
    save_json(result, out)
    _print_handeye(result)
    print(f"wrote {out}")
    return 0


def _print_handeye(result: HandEyeCalibration) -> None:
    for name, why in result.samples_rejected.items():
        print(f"  -- {name}: {why}")
    header = ("method", "rot rms°", "rot max°", "trans rms mm", "trans max mm", "reproj px")
    print(f"{header[0]:<11} {header[1]:>9} {header[2]:>9} {header[3]:>13} {header[4]:>13} {header[5]:>10}")
    for m in result.methods:
        if m.error:
            print(f"{m.method:<11} failed: {m.error}")
            continue
        print(
            f"{m.method:<11} {m.rotation_rms_deg:9.3f} {m.rotation_max_deg:9.3f} "
            f"{m.translation_rms_mm:13.2f} {m.translation_max_mm:13.2f} {m.reprojection_rms_px:10.3f}"
        )
    print(
        f"{result.camera} ({result.mount}): {result.frame} by {result.method}: position "
        f"{np.round(result.position_m, 4).tolist()} m, quat xyzw {np.round(result.quat_xyzw, 4).tolist()}; "
        f"{result.n_samples} samples spanning {result.rotation_span_deg:.0f}°"
    )
    for warning in result.warnings:
        print(f"warning: {warning}")


def _collect(args: argparse.Namespace, board: BoardSpec) -> int:
    from calibration.collect import CollectError, collect
    from pde_contract.client import RobotClient, RobotServerError
    from pde_contract.link import client_curve_for_command

    cameras = [c.strip() for c in args.cameras.split(",")] if args.cameras else None
    try:
        with RobotClient(
            cmd_endpoint=args.endpoint,
            name="calibrate",
            timeout_s=args.timeout_s,
            curve=client_curve_for_command("pde calibrate collect"),
        ) as client:
            collect(
                client,
                args.out,
                board,
                cameras=cameras,
                plan=args.plan,
                reset_first=args.reset,
                pivot_m=args.pivot_m,
            )
    except (RobotServerError, CollectError) as e:
        print(f"pde calibrate collect: {e}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, EOFError):
        print("\nstopped; the samples saved so far are kept", file=sys.stderr)
        return 0
    return 0
