"""What ``pde doctor`` reads of the machine: one boundary, ``System``. ``HostSystem`` reads the real
/proc, /sys, sockets and commands; the tests give the checks a fake one (tests/fakes/fake_system.py)
so each check's pass and fail can be shown on a machine that has no FR3, camera or RT kernel.

Every method answers "not there / not readable" with None rather than raising, so one unreadable
source turns one check into a skip and never stops the others.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Literal

RlimitName = Literal["rtprio", "memlock"]
UNLIMITED = -1  # an rlimit of RLIM_INFINITY


@dataclass(frozen=True)
class CommandOutput:
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class CameraFound:
    """A RealSense camera as pyrealsense2 lists it; ``usb_type`` is its USB link, e.g. "3.2"."""

    serial: str
    name: str
    usb_type: str


@dataclass(frozen=True)
class Handshake:
    """libfranka's connect to the FCI: ``ok`` (version accepted and the UDP state stream arrived),
    ``incompatible`` (IncompatibleVersionException), ``error`` (any other exception) or
    ``timeout`` (no answer before the deadline). ``message``: the exception's text."""

    outcome: Literal["ok", "incompatible", "error", "timeout"]
    message: str = ""


class System(ABC):
    """The machine as the doctor's checks see it."""

    @abstractmethod
    def read_text(self, path: str) -> str | None:
        """A file's text, or None when it is absent or unreadable."""

    @abstractmethod
    def list_dir(self, path: str) -> list[str] | None:
        """The names in a directory, sorted, or None when it is absent or unreadable."""

    @abstractmethod
    def uname(self) -> tuple[str, str]:
        """The kernel's (release, version): ``uname -r`` and ``uname -v``."""

    @abstractmethod
    def rlimit(self, name: RlimitName) -> tuple[int, int]:
        """This process's (soft, hard) limit; UNLIMITED for no limit. memlock in bytes."""

    @abstractmethod
    def sched_fifo_error(self, priority: int) -> str | None:
        """None when a thread of this process may switch to SCHED_FIFO ``priority`` (tried on a
        throwaway thread), else the kernel's refusal."""

    @abstractmethod
    def run(self, argv: list[str]) -> CommandOutput | None:
        """The command's output, or None when the program is not installed."""

    @abstractmethod
    def resolve(self, host: str) -> str | None:
        """The IPv4 address of ``host``, or None when it does not resolve."""

    @abstractmethod
    def tcp_connect(self, host: str, port: int, timeout_s: float) -> str | None:
        """None when a TCP connection opens (it is closed at once), else why not."""

    @abstractmethod
    def realsense_cameras(self) -> list[CameraFound] | None:
        """The RealSense cameras pyrealsense2 finds, or None when pyrealsense2 does not import."""

    @abstractmethod
    def libfranka_version(self) -> tuple[str, str] | None:
        """(franky-control's version, the libfranka version it bundles), or None if not installed."""

    @abstractmethod
    def franka_handshake(self, host: str, timeout_s: float) -> Handshake:
        """Connect to the FCI with franky as the robot server does (no motion), then disconnect."""


# Run in a child process so a peer that accepts and never answers (franky's constructor then
# blocks forever, /work/shared/FR3.md) costs a timeout, not a hung doctor.
_HANDSHAKE = """
import sys, franky
try:
    franky.Robot(sys.argv[1], realtime_config=franky.RealtimeConfig.Ignore)
except franky.IncompatibleVersionException as e:
    print("incompatible"); print(e)
except Exception as e:
    print("error"); print(type(e).__name__ + ": " + str(e))
else:
    print("ok")
"""


_START_S = 5.0  # the child's Python start and franky import, on top of the network timeout


class HostSystem(System):
    """This machine (or this container: limits and capabilities are the container's)."""

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return None

    def list_dir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return None

    def uname(self) -> tuple[str, str]:
        u = os.uname()
        return u.release, u.version

    def rlimit(self, name: RlimitName) -> tuple[int, int]:
        which = {"rtprio": resource.RLIMIT_RTPRIO, "memlock": resource.RLIMIT_MEMLOCK}[name]
        soft, hard = (UNLIMITED if v == resource.RLIM_INFINITY else int(v) for v in resource.getrlimit(which))
        return soft, hard

    def sched_fifo_error(self, priority: int) -> str | None:
        errors: list[str] = []

        def attempt() -> None:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))  # 0: this thread
            except OSError as e:
                errors.append(str(e))

        thread = threading.Thread(target=attempt, name="pde-doctor-sched-fifo")
        thread.start()
        thread.join()
        return errors[0] if errors else None

    def run(self, argv: list[str]) -> CommandOutput | None:
        exe = shutil.which(argv[0])
        if exe is None:
            return None
        try:
            done = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            return CommandOutput(-1, "", str(e))
        return CommandOutput(done.returncode, done.stdout, done.stderr)

    def resolve(self, host: str) -> str | None:
        try:
            return socket.gethostbyname(host)
        except OSError:
            return None

    def tcp_connect(self, host: str, port: int, timeout_s: float) -> str | None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return None
        except TimeoutError:
            return f"no answer within {timeout_s:g} s"
        except OSError as e:
            return e.strerror or str(e)

    def realsense_cameras(self) -> list[CameraFound] | None:
        try:
            import pyrealsense2 as rs
        except ImportError:
            return None
        info = rs.camera_info
        return [
            CameraFound(
                d.get_info(info.serial_number),
                d.get_info(info.name),
                d.get_info(info.usb_type_descriptor) if d.supports(info.usb_type_descriptor) else "",
            )
            for d in rs.context().query_devices()
        ]

    def libfranka_version(self) -> tuple[str, str] | None:
        # The franky-control wheel bundles libfranka as franky_control.libs/libfranka-<hash>.so.X.Y.Z.
        try:
            dist = importlib.metadata.distribution("franky-control")
        except importlib.metadata.PackageNotFoundError:
            return None
        bundled = (re.search(r"libfranka[^/]*\.so\.(\d+\.\d+\.\d+)$", str(f)) for f in dist.files or [])
        found = next((m.group(1) for m in bundled if m), "unknown")
        return dist.version, found

    def franka_handshake(self, host: str, timeout_s: float) -> Handshake:
        deadline_s = timeout_s + _START_S
        try:
            done = subprocess.run(
                [sys.executable, "-c", _HANDSHAKE, host],
                capture_output=True,
                text=True,
                timeout=deadline_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Handshake("timeout", f"no answer within {deadline_s:g} s")
        outcome, _, message = done.stdout.strip().partition("\n")
        if outcome in ("ok", "incompatible", "error"):
            return Handshake(outcome, message.strip())  # type: ignore[arg-type]
        return Handshake("error", (done.stderr.strip().splitlines() or ["the check crashed"])[-1])
