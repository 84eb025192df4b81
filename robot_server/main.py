"""``pde robot-server``: run the server, ``pde robot-server watch`` to look at its stream, or
``pde robot-server guide`` to hand the arm to an operator (guiding mode) until Enter.

    pde robot-server --backend sim                      # realtime, 10 Hz, ports 5556 / 5555
    pde robot-server --backend sim --pacing fast --cmd-port 7000 --obs-port 7001
    pde robot-server watch --cmd tcp://127.0.0.1:5556 --save-dir /tmp/frames
    pde robot-server guide --cmd tcp://127.0.0.1:5556

Every option is also an environment variable ``PDE_ROBOT_<OPTION>`` (flags win), and a key of
the robot configuration file (``--config``/``PDE_ROBOT_CONFIG``; environment variables win):
``pde robot-server --print-config`` shows each effective value and where it came from.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from robot_server.config_file import (
    ENV_CONFIG_FILE,
    EXAMPLE,
    ConfigFileError,
    config_file_path,
    effective_settings,
    format_settings,
)

if TYPE_CHECKING:
    from robot_server.settings import RobotServerSettings

log = logging.getLogger("robot_server")


def _server_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pde robot-server", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--config",
        type=Path,
        help=f"the robot configuration file (TOML; {EXAMPLE} lists every key); default: ${ENV_CONFIG_FILE}",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print every effective setting and its source (default, file, environment, flag), then exit",
    )
    p.add_argument("--backend", choices=["sim", "franka"], help="sim (MuJoCo) or franka (FR3 over FCI)")
    p.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--advertise-host", help="host name clients use to reach this machine")
    p.add_argument("--cmd-port", type=int, help="ROUTER port for commands (default 5556)")
    p.add_argument("--obs-port", type=int, help="PUB port for observations (default 5555)")
    p.add_argument(
        "--link-secret-key",
        type=Path,
        help="CURVE: this server's server.key_secret (`pde keys init`); needed for a non-loopback --host",
    )
    p.add_argument("--link-clients-dir", type=Path, help="CURVE: folder of the client *.key files it accepts")
    p.add_argument("--control-rate-hz", type=float, help="control ticks per second (default 10)")
    p.add_argument(
        "--pacing", choices=["realtime", "fast"], help="realtime, or fast (sim: chunks back to back)"
    )
    p.add_argument("--camera-fps", type=float, help="observation rate in realtime pacing (default 30)")
    p.add_argument("--heartbeat-timeout-s", type=float, help="watchdog timeout (default 0.2; 0 disables)")
    p.add_argument(
        "--rt-priority",
        type=int,
        help="SCHED_FIFO priority of the control thread, 0..49 (0: normal; default: franka 40, sim 0)",
    )
    p.add_argument("--image-size", help="sim camera size WIDTHxHEIGHT (default 224x224)")
    p.add_argument(
        "--sim-layout-spread",
        type=float,
        help="sim: how far task resets scatter objects, 0..1 (default 1: the whole layout box)",
    )
    p.add_argument(
        "--sim-profile",
        choices=["default", "fast"],
        help="sim speed profile (default: default; fast changes episodes: benchmarks only, docs/sim.md)",
    )
    p.add_argument(
        "--clip-policy", choices=["clip", "reject"], help="targets beyond the limits: clip or reject"
    )
    p.add_argument("--log-level", default="INFO")
    return p


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    not_settings = ("image_size", "log_level", "config", "print_config")
    out = {k: v for k, v in vars(args).items() if v is not None and k not in not_settings}
    if args.image_size:
        try:
            w, h = (int(x) for x in args.image_size.lower().split("x"))
        except ValueError:
            raise SystemExit(
                f"pde robot-server: --image-size {args.image_size!r} must look like 224x224"
            ) from None
        out["image_width"], out["image_height"] = w, h
    return out


def serve(argv: list[str]) -> int:
    args = _server_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from robot_server.backends import BackendUnavailableError, build_backend, franka_config, franka_flags
    from robot_server.config_check import check_cell
    from robot_server.robots.franka.config import FrankaConfig
    from robot_server.server import BindError, RobotServer
    from robot_server.settings import RobotServerSettings

    if args.config is not None:  # the settings sources read the file's name from here
        os.environ[ENV_CONFIG_FILE] = str(args.config)
    flags = _overrides(args)
    try:
        settings = RobotServerSettings(**flags)
        # The [franka] section is read and checked on the sim backend too: a lab tries its file
        # on the sim first, and a mistake there should not wait for the arm.
        franka: FrankaConfig = franka_config(settings)
        check_cell(settings, franka)
    except (ValidationError, ConfigFileError) as e:
        print(f"pde robot-server: invalid settings:\n{e}", file=sys.stderr)
        return 2
    lines = [f"robot configuration file: {config_file_path() or f'none ({ENV_CONFIG_FILE} is not set)'}"]
    lines += format_settings(effective_settings(settings, flags))
    lines += format_settings(effective_settings(franka, franka_flags(settings), "[robot] fci_host"))
    if settings.backend != "franka":
        lines.append(f"([franka] is checked but not used: backend {settings.backend})")
    if args.print_config:
        print("\n".join(lines), flush=True)
        return 0
    for line in lines:
        log.info("%s", line)
    try:
        backend = build_backend(settings, franka)
    except BackendUnavailableError as e:
        print(f"pde robot-server: {e}", file=sys.stderr)
        return 2
    # Hand the GIL over within 1 ms (default 5 ms): the control thread wakes on time even while
    # camera threads run Python code.
    sys.setswitchinterval(0.001)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    server = RobotServer(backend.robot, backend.cameras, settings)
    try:
        server.start()
    except Exception as e:
        # Only the bind says "port": an RT-kernel refusal, FCI refused or a missing camera say their own.
        cause = str(e) if isinstance(e, BindError) else f"{type(e).__name__}: {e}"
        print(f"pde robot-server: could not start ({cause})", file=sys.stderr)
        server.close()
        backend.close()
        return 1
    print(
        f"robot-server ready: backend={settings.backend} commands={settings.cmd_endpoint} "
        f"observations={settings.obs_endpoint} control={settings.control_rate_hz} Hz "
        f"pacing={settings.pacing} link={_link_mode(settings)}",
        flush=True,
    )
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.close()
        backend.close()
        print("robot-server stopped", flush=True)
    return 0


def _link_mode(settings: RobotServerSettings) -> str:
    """What the ready line says about the robot link: encrypted, or plain (loopback only)."""
    curve = settings.link_curve()
    if curve is None:
        return "plain (loopback only)"
    clients = curve.allowed_clients - {curve.keys.public}  # its own key is accepted for health checks
    return f"curve ({len(clients)} client keys from {settings.link_clients_dir})"


def watch(argv: list[str]) -> int:
    """Print the stream once per second; optionally save the newest frame of each camera."""
    p = argparse.ArgumentParser(prog="pde robot-server watch")
    p.add_argument("--cmd", default="tcp://127.0.0.1:5556", help="the server's command endpoint")
    p.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: until Ctrl-C)")
    p.add_argument("--save-dir", type=Path, help="write <camera>.jpg here, refreshed every second")
    args = p.parse_args(argv)
    from pde_contract.client import RobotClient, RobotServerError
    from pde_contract.link import client_curve_for_command
    from pde_contract.messages import RobotFault

    with RobotClient(
        cmd_endpoint=args.cmd,
        name="watch",
        timeout_s=2.0,
        curve=client_curve_for_command("pde robot-server watch"),
    ) as client:
        try:
            info = client.connect()
        except RobotServerError as e:
            print(f"pde robot-server watch: {e}", file=sys.stderr)
            return 1
        print(
            f"connected to {info.server_name} ({info.backend}, {info.control_rate_hz} Hz), "
            f"cameras {info.cameras}, observations on {info.obs_endpoint}",
            flush=True,
        )
        t_end = time.monotonic() + args.seconds if args.seconds > 0 else float("inf")
        n, t_report = 0, time.monotonic()
        try:
            while time.monotonic() < t_end:
                obs = client.latest_observation(timeout_s=2.0)
                n += 1
                now = time.monotonic()
                if now - t_report < 1.0:
                    continue
                recv_s = time.time()
                cams = " ".join(
                    f"{f.name}:{f.width}x{f.height}#{f.frame_index}"
                    f"({(recv_s - f.capture_time_s) * 1e3:.1f}ms)"
                    for f in obs.cameras
                )
                pos = " ".join(f"{x:+.3f}" for x in obs.state.ee_position_m)
                st = client.status()
                fault = (
                    f" fault={st.fault.value}: {st.fault_detail} {st.fault_action}"
                    if st.fault is not RobotFault.NONE
                    else ""
                )
                guiding = " guiding" if st.guiding else ""
                print(
                    f"obs#{obs.seq} {n / (now - t_report):5.1f}/s ee=[{pos}] m "
                    f"gripper={obs.state.gripper_width_m:.3f} m chunk={obs.executing_chunk_seq} "
                    f"estop={obs.estopped}{guiding}{fault} {cams}",
                    flush=True,
                )
                if args.save_dir:
                    args.save_dir.mkdir(parents=True, exist_ok=True)
                    for f in obs.cameras:
                        (args.save_dir / f"{f.name}.jpg").write_bytes(f.jpeg)
                n, t_report = 0, now
        except KeyboardInterrupt:
            pass
        except RobotServerError as e:
            print(f"pde robot-server watch: {e}", file=sys.stderr)
            return 1
    return 0


def guide(argv: list[str]) -> int:
    """Hand the arm to an operator (guiding mode) until Enter, Ctrl-C or ``--seconds``, then take
    it back: e.g. for ``pde calibrate collect`` without ``--plan``."""
    p = argparse.ArgumentParser(prog="pde robot-server guide")
    p.add_argument("--cmd", default="tcp://127.0.0.1:5556", help="the server's command endpoint")
    p.add_argument("--seconds", type=float, default=0.0, help="end after this long (0: on Enter)")
    args = p.parse_args(argv)
    from pde_contract.client import RobotClient, RobotServerError
    from pde_contract.link import client_curve_for_command

    with RobotClient(
        cmd_endpoint=args.cmd,
        name="guide",
        timeout_s=2.0,
        curve=client_curve_for_command("pde robot-server guide"),
    ) as client:
        try:
            client.connect()
            client.set_guiding_mode(True)
        except RobotServerError as e:
            print(f"pde robot-server guide: {e}", file=sys.stderr)
            return 1
        print(
            "guiding mode on: the server sends the arm no targets. FR3: press the pilot's guiding "
            "button and move the arm by hand. "
            + (f"Ends in {args.seconds:g} s." if args.seconds > 0 else "Press Enter to end."),
            flush=True,
        )
        try:
            if args.seconds > 0:
                time.sleep(args.seconds)
            else:
                input()
        except (KeyboardInterrupt, EOFError):
            pass
        finally:
            try:
                client.set_guiding_mode(False)
            except RobotServerError as e:
                print(f"pde robot-server guide: could not end guiding mode: {e}", file=sys.stderr)
                return 1
        print("guiding mode off: the arm holds where it was left", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "watch":
        return watch(argv[1:])
    if argv and argv[0] == "guide":
        return guide(argv[1:])
    return serve(argv)


if __name__ == "__main__":
    sys.exit(main())
