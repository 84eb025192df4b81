"""A fake of ``pde.doctor.system.System``: the robot PC as files, limits, command outputs and
network answers held in fields, so each doctor check can be shown passing and failing on a machine
that has no RT kernel, FR3 or camera. ``ready_robot_pc()`` is a PC on which every check passes."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pde.doctor.system import UNLIMITED, CameraFound, CommandOutput, Handshake, RlimitName, System


def route_line(iface: str, network: str, gateway: str | None = None, metric: int = 100) -> str:
    """One /proc/net/route line (addresses as the kernel writes them: little-endian hex)."""
    net = ipaddress.IPv4Network(network)

    def hexed(addr: ipaddress.IPv4Address) -> str:
        return int.from_bytes(addr.packed, "little").to_bytes(4, "big").hex().upper()

    flags = 0x3 if gateway else 0x1
    gw = hexed(ipaddress.IPv4Address(gateway)) if gateway else "00000000"
    return (
        f"{iface}\t{hexed(net.network_address)}\t{gw}\t{flags:04X}\t0\t0\t{metric}\t"
        f"{hexed(net.netmask)}\t0\t0\t0"
    )


ROUTE_HEADER = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"


@dataclass
class FakeSystem(System):
    files: dict[str, str] = field(default_factory=dict)
    release: str = "6.12.43+deb13-rt-amd64"
    version: str = "#1 SMP PREEMPT_RT Debian 6.12.43-1 (2025-08-27)"
    rlimits: dict[str, tuple[int, int]] = field(default_factory=dict)
    commands: dict[str, CommandOutput] = field(default_factory=dict)  # "nft list ruleset" -> output
    hosts: dict[str, str] = field(default_factory=dict)  # name -> IPv4
    tcp_errors: dict[tuple[str, int], str] = field(default_factory=dict)  # absent: connects
    cameras: list[CameraFound] | None = None  # None: pyrealsense2 does not import
    libfranka: tuple[str, str] | None = ("2.0.0", "0.21.2")
    handshake: Handshake = field(default_factory=lambda: Handshake("ok"))
    handshakes: list[str] = field(default_factory=list)  # hosts connected to
    sched_fifo_refused: str | None = None  # the kernel's refusal of SCHED_FIFO (None: allowed)

    def read_text(self, path: str) -> str | None:
        return self.files.get(path)

    def list_dir(self, path: str) -> list[str] | None:
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix) :].split("/")[0] for p in self.files if p.startswith(prefix)}
        return sorted(names) or None

    def uname(self) -> tuple[str, str]:
        return self.release, self.version

    def rlimit(self, name: RlimitName) -> tuple[int, int]:
        return self.rlimits.get(name, (0, 0))

    def sched_fifo_error(self, priority: int) -> str | None:
        return self.sched_fifo_refused

    def run(self, argv: list[str]) -> CommandOutput | None:
        return self.commands.get(" ".join(argv))

    def resolve(self, host: str) -> str | None:
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            return self.hosts.get(host)

    def tcp_connect(self, host: str, port: int, timeout_s: float) -> str | None:
        return self.tcp_errors.get((host, port))

    def realsense_cameras(self) -> list[CameraFound] | None:
        return self.cameras

    def libfranka_version(self) -> tuple[str, str] | None:
        return self.libfranka

    def franka_handshake(self, host: str, timeout_s: float) -> Handshake:
        self.handshakes.append(host)
        return self.handshake


FCI_HOST = "172.16.0.2"
SERIALS = {"external": "123456789012", "wrist": "234567890123"}


def ready_robot_pc() -> FakeSystem:
    """A robot PC as docs/lab-setup.md describes it: every doctor check passes."""
    routes = [
        ROUTE_HEADER,
        route_line("eno1", "0.0.0.0/0", gateway="192.168.1.1"),
        route_line("eno1", "192.168.1.0/24"),
        route_line("enp3s0", "172.16.0.0/24", metric=101),
    ]
    return FakeSystem(
        files={
            "/sys/kernel/realtime": "1\n",
            "/proc/self/status": "Name:\tpde\nCapEff:\t0000000000000000\n",
            "/proc/net/route": "\n".join(routes) + "\n",
            "/sys/class/net/enp3s0/operstate": "up\n",
            "/sys/class/net/enp3s0/speed": "1000\n",
            **{f"/sys/devices/system/cpu/cpu{i}/cpufreq/scaling_governor": "performance\n" for i in range(4)},
        },
        rlimits={"rtprio": (99, 99), "memlock": (UNLIMITED, UNLIMITED)},
        commands={
            "ufw status verbose": CommandOutput(
                0,
                "Status: active\nLogging: on (low)\n"
                "Default: deny (incoming), allow (outgoing), disabled (routed)\nNew profiles: skip\n\n"
                "To                         Action      From\n"
                "--                         ------      ----\n"
                "5555:5556/tcp              ALLOW IN    192.168.1.20\n"
                "Anywhere on enp3s0         ALLOW IN    Anywhere\n",
                "",
            ),
        },
        cameras=[
            CameraFound(SERIALS["external"], "Intel RealSense D435", "3.2"),
            CameraFound(SERIALS["wrist"], "Intel RealSense D405", "3.2"),
        ],
    )
