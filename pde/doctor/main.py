"""``pde doctor``: is this robot PC ready for the FR3? One line per check (pass, fail or skip, and
what to do), exit 1 when any check fails.

Run it where the robot server runs, so limits and devices are the ones the server gets:
``docker compose -f docker-compose.robot.yml run --rm robot_server doctor`` (before ``up``: the
libfranka check connects to the FCI, which takes one client at a time). The firewall can only be
read as root on the host: ``sudo .venv/bin/pde doctor`` there.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from pde.doctor.checks import CheckResult, DoctorConfig, run_checks
from pde.doctor.system import HostSystem, System


def _camera(value: str) -> tuple[str, str]:
    name, sep, serial = value.partition("=")
    if not sep or not name or not serial:
        raise argparse.ArgumentTypeError(f"{value!r}: use NAME=SERIAL, e.g. wrist=234567890123")
    return name, serial


def _configured() -> tuple[str, dict[str, str]]:
    """The FCI host and camera serials the robot server would use (its environment and file),
    checked as the server checks them at start."""
    from robot_server.backends import franka_config
    from robot_server.config_check import check_cell
    from robot_server.settings import RobotServerSettings

    settings = RobotServerSettings()
    franka = franka_config(settings)
    check_cell(settings, franka)
    return franka.host, dict(settings.realsense_serials)


def report(results: list[CheckResult], out: TextIO | None = None) -> int:
    """Print one line per check (and its fix); the exit code: 1 when any check failed."""
    out = out or sys.stdout
    width = max(len(r.name) for r in results)
    for r in results:
        print(f"{r.status.upper():<4}  {r.name:<{width}}  {r.detail}", file=out)
        if r.fix:
            print(f"      {'':<{width}}  fix: {r.fix}", file=out)
    counts = {s: sum(r.status == s for r in results) for s in ("fail", "skip", "pass")}
    print(f"{counts['fail']} failed, {counts['skip']} skipped, {counts['pass']} passed", file=out)
    return 1 if counts["fail"] else 0


def main(argv: list[str] | None = None, system: System | None = None) -> int:
    ap = argparse.ArgumentParser(prog="pde doctor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--fci-host", help="the arm's FCI address (default: the robot server's setting)")
    ap.add_argument(
        "--camera",
        type=_camera,
        action="append",
        metavar="NAME=SERIAL",
        help=(
            "a RealSense to look for (default: the robot configuration's [robot.realsense_serials]); "
            "repeat per camera"
        ),
    )
    ap.add_argument(
        "--no-connect",
        action="store_true",
        help="skip libfranka's connect (while the robot server holds the FCI)",
    )
    ap.add_argument("--timeout-s", type=float, default=5.0, help="per network check (default 5)")
    args = ap.parse_args(argv)
    try:
        host, serials = _configured()
    except Exception as e:  # a bad setting: say which, as the server would
        print(f"pde doctor: the robot server's settings do not load: {e}", file=sys.stderr)
        return 2
    cfg = DoctorConfig(
        fci_host=args.fci_host or host,
        camera_serials=dict(args.camera) if args.camera else serials,
        handshake=not args.no_connect,
        timeout_s=args.timeout_s,
    )
    return report(run_checks(system or HostSystem(), cfg))
