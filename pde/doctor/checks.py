"""The robot PC's checks, each a small function of (System, DoctorConfig) -> CheckResult.

Facts they rest on:
- libfranka's control thread asks for SCHED_FIFO at the highest priority (99), so the process needs
  RLIMIT_RTPRIO 99 or CAP_SYS_NICE; Franka's installation guide asks for memlock 102400 kB.
- libfranka opens TCP 1337 to the FCI for commands, and the arm then sends its 1 kHz state over UDP
  to a port libfranka picked: the first packet comes *from the robot*, so a firewall that drops
  new incoming traffic (ufw's "default deny incoming") drops the state stream.
- libfranka 0.21's own real-time check reads only /sys/kernel/realtime; mainline PREEMPT_RT kernels
  (6.12+, e.g. Debian 13's linux-image-rt) lack that file and say PREEMPT_RT in ``uname -v``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

from pde.doctor.system import UNLIMITED, Handshake, System
from robot_server.robots.franka.realtime import classify_kernel

Status = Literal["pass", "fail", "skip"]

FCI_PORT = 1337
LIBFRANKA_RT_PRIORITY = 99
MEMLOCK_MIN_BYTES = 102400 * 1024
CAP_SYS_NICE = 23  # bit in /proc/self/status CapEff
# cgroup v1's real-time budget of this process's cgroup (its own, inside a container)
RT_RUNTIME_FILE = "/sys/fs/cgroup/cpu/cpu.rt_runtime_us"
USB3_MIN_MBPS = 5000
REALSENSE_VENDOR = "8086"  # Intel's USB vendor id
FRANKA_COMPATIBILITY = "https://frankaemika.github.io/docs/compatibility.html"


@dataclass(frozen=True)
class DoctorConfig:
    fci_host: str
    camera_serials: dict[str, str] = field(default_factory=dict)  # camera name -> serial
    handshake: bool = True  # connect with libfranka (off while the robot server holds the FCI)
    timeout_s: float = 5.0


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    detail: str  # what was found
    fix: str = ""  # what to do (fail and skip)


def _ok(name: str, detail: str) -> CheckResult:
    return CheckResult(name, "pass", detail)


def _fail(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, "fail", detail, fix)


def _skip(name: str, detail: str, fix: str = "") -> CheckResult:
    return CheckResult(name, "skip", detail, fix)


# Kernel ------------------------------------------------------------------------------------------


def check_kernel(system: System, cfg: DoctorConfig) -> CheckResult:
    release, version = system.uname()
    # The robot server's own decision (robot_server/robots/franka/realtime.py), on what System reads.
    rt = classify_kernel(system.read_text("/sys/kernel/realtime"), version)
    if rt.libfranka_sees_it:
        return _ok("kernel", f"{release}, PREEMPT_RT (/sys/kernel/realtime = 1)")
    if rt.realtime:
        return _ok(
            "kernel",
            f"{release}, PREEMPT_RT (uname -v; a mainline RT kernel without /sys/kernel/realtime, "
            "which libfranka 0.21's own check reads: see docs/lab-setup.md §1)",
        )
    return _fail(
        "kernel",
        f"{release} is not PREEMPT_RT (uname -v: {version.strip()})",
        "install a PREEMPT_RT kernel and boot it (Debian: apt install linux-image-rt-amd64; Ubuntu: "
        "pro enable realtime-kernel); libfranka refuses to control the arm without one",
    )


def check_cpu_governor(system: System, cfg: DoctorConfig) -> CheckResult:
    cpus = [c for c in system.list_dir("/sys/devices/system/cpu") or [] if re.fullmatch(r"cpu\d+", c)]
    governors = {
        c: (system.read_text(f"/sys/devices/system/cpu/{c}/cpufreq/scaling_governor") or "").strip()
        for c in cpus
    }
    governors = {c: g for c, g in governors.items() if g}
    if not governors:
        return _skip("cpu-governor", "no cpufreq here (a VM, or frequency scaling off in firmware)")
    slow = sorted(c for c, g in governors.items() if g != "performance")
    if slow:
        return _fail(
            "cpu-governor",
            f"{len(slow)} of {len(governors)} CPUs not on 'performance' ({slow[0]}: {governors[slow[0]]})",
            "sudo cpupower frequency-set -g performance (and make it persist, e.g. cpufrequtils)",
        )
    return _ok("cpu-governor", f"all {len(governors)} CPUs on 'performance'")


# Limits ------------------------------------------------------------------------------------------


def _has_cap(system: System, bit: int) -> bool:
    status = system.read_text("/proc/self/status") or ""
    match = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", status, re.MULTILINE)
    return match is not None and bool(int(match.group(1), 16) >> bit & 1)


def check_rt_priority(system: System, cfg: DoctorConfig) -> CheckResult:
    soft, _ = system.rlimit("rtprio")
    if _has_cap(system, CAP_SYS_NICE):
        allowed = f"CAP_SYS_NICE held (RLIMIT_RTPRIO {soft})"
    elif soft == UNLIMITED or soft >= LIBFRANKA_RT_PRIORITY:
        allowed = f"RLIMIT_RTPRIO {soft}"
    else:
        allowed = ""
    if allowed:
        # The limits allow it; the kernel may still refuse (real-time time by cgroup): ask it.
        refused = system.sched_fifo_error(LIBFRANKA_RT_PRIORITY)
        if refused is None:
            return _ok("rt-priority", f"{allowed}: a thread switched to SCHED_FIFO {LIBFRANKA_RT_PRIORITY}")
        budget = system.read_text(RT_RUNTIME_FILE)
        where = (
            f"; this cgroup has {budget.strip()} µs of real-time time per period ({RT_RUNTIME_FILE}): "
            "the kernel schedules real-time by cgroup (CONFIG_RT_GROUP_SCHED)"
            if budget is not None
            else ""
        )
        return _fail(
            "rt-priority",
            f"{allowed}, yet the kernel refused SCHED_FIFO {LIBFRANKA_RT_PRIORITY} ({refused}){where}",
            "give the container real-time time: `dockerd --cpu-rt-runtime=950000` and `cpu_rt_runtime: "
            "900000` on robot_server (docs/lab-setup.md §7); or boot a kernel without "
            "CONFIG_RT_GROUP_SCHED",
        )
    return _fail(
        "rt-priority",
        f"RLIMIT_RTPRIO {soft} and no CAP_SYS_NICE: libfranka's control thread asks for SCHED_FIFO "
        f"{LIBFRANKA_RT_PRIORITY} and is refused",
        "in compose: cap_add [SYS_NICE] and ulimits rtprio 99 (docker/compose.services.yml has both; "
        "run the doctor with `docker compose ... run --rm robot_server doctor`); on the host: "
        "/etc/security/limits.d/99-realtime.conf (docs/lab-setup.md §1), log in again",
    )


def check_memlock(system: System, cfg: DoctorConfig) -> CheckResult:
    soft, _ = system.rlimit("memlock")
    if soft == UNLIMITED or soft >= MEMLOCK_MIN_BYTES:
        shown = "unlimited" if soft == UNLIMITED else f"{soft // 1024} kB"
        return _ok("memlock", f"RLIMIT_MEMLOCK {shown}")
    return _fail(
        "memlock",
        f"RLIMIT_MEMLOCK {soft // 1024} kB, below the {MEMLOCK_MIN_BYTES // 1024} kB Franka asks for",
        "in compose: ulimits memlock -1; on the host: memlock 102400 in "
        "/etc/security/limits.d/99-realtime.conf (docs/lab-setup.md §1)",
    )


# Network -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    iface: str
    network: ipaddress.IPv4Network
    gateway: ipaddress.IPv4Address | None
    metric: int


def _hex_ip(text: str) -> ipaddress.IPv4Address:
    # /proc/net/route writes addresses as the little-endian hex of the in-memory word
    return ipaddress.IPv4Address(int(text, 16).to_bytes(4, "little"))


def parse_routes(text: str) -> list[Route]:
    """The IPv4 routes of /proc/net/route that are up."""
    routes = []
    for line in text.splitlines()[1:]:
        cols = line.split()
        if len(cols) < 8 or not int(cols[3], 16) & 0x1:  # RTF_UP
            continue
        gateway = _hex_ip(cols[2]) if int(cols[3], 16) & 0x2 else None  # RTF_GATEWAY
        network = ipaddress.IPv4Network(f"{_hex_ip(cols[1])}/{_hex_ip(cols[7])}", strict=False)
        routes.append(Route(cols[0], network, gateway, int(cols[6])))
    return routes


def route_to(routes: list[Route], ip: ipaddress.IPv4Address) -> Route | None:
    """The route the kernel takes to ``ip``: longest prefix, then lowest metric."""
    matches = [r for r in routes if ip in r.network]
    return min(matches, key=lambda r: (-r.network.prefixlen, r.metric), default=None)


def _fci_address(system: System, cfg: DoctorConfig) -> ipaddress.IPv4Address | None:
    resolved = system.resolve(cfg.fci_host)
    return ipaddress.IPv4Address(resolved) if resolved else None


def _fci_nic(system: System, ip: ipaddress.IPv4Address) -> Route | None:
    return route_to(parse_routes(system.read_text("/proc/net/route") or ""), ip)


def check_fci_nic(system: System, cfg: DoctorConfig) -> CheckResult:
    ip = _fci_address(system, cfg)
    if ip is None:
        return _fail(
            "fci-nic",
            f"FCI host {cfg.fci_host!r} does not resolve",
            "set fci_host under [robot] in the robot configuration file (config/robot.toml) to its IP",
        )
    if ip.is_loopback:
        return _ok("fci-nic", f"{ip} is loopback: a franky-sim, not the arm")
    routes = parse_routes(system.read_text("/proc/net/route") or "")
    if not routes:
        return _skip("fci-nic", "/proc/net/route is unreadable or empty")
    route = route_to(routes, ip)
    fix_addr = (
        "give the NIC cabled to the control box a static address on the arm's subnet, e.g. "
        "nmcli con add type ethernet ifname <nic> con-name fci ipv4.method manual "
        "ipv4.addresses 172.16.0.1/24 (docs/lab-setup.md §1)"
    )
    if route is None:
        return _fail("fci-nic", f"no route to {ip}: no NIC has an address on its subnet", fix_addr)
    if route.gateway is not None:
        return _fail(
            "fci-nic", f"{ip} is reached through the gateway {route.gateway} on {route.iface}", fix_addr
        )
    state = (system.read_text(f"/sys/class/net/{route.iface}/operstate") or "unknown").strip()
    speed = (system.read_text(f"/sys/class/net/{route.iface}/speed") or "").strip()
    speed = f"{speed} Mb/s" if speed.isdigit() else "speed unknown"
    if state != "up":
        return _fail(
            "fci-nic",
            f"{ip} is on {route.iface} ({route.network}), which is {state}",
            f"plug the control box's LAN port into {route.iface}; `ip link set {route.iface} up`",
        )
    if any(r.iface == route.iface and r.network.prefixlen == 0 for r in routes):
        return _fail(
            "fci-nic",
            f"{ip} is on {route.iface}, which also carries the default route (lab LAN / internet)",
            "use a NIC for the FCI alone, cabled straight to the control box (docs/lab-setup.md §1)",
        )
    return _ok("fci-nic", f"{ip} on {route.iface} ({route.network}, directly connected, {speed})")


def _covers(source: str, ip: ipaddress.IPv4Address) -> bool:
    """A firewall rule's source address or network includes ``ip``."""
    try:
        return ip in ipaddress.IPv4Network(source, strict=False)
    except ValueError:
        return False


def _ufw_verdict(out: str, nic: str, ip: ipaddress.IPv4Address) -> bool | None:
    """True: lets the state stream in; False: drops it; None: ufw is inactive."""
    if "Status: active" not in out:
        return None
    default = re.search(r"Default:\s*(\w+) \(incoming\)", out)
    if default and default.group(1) == "allow":
        return True
    for line in out.splitlines():
        rule = re.match(r"(.+?)\s{2,}ALLOW(?: IN)?\s{2,}(\S+)", line)
        if rule is None or "(v6)" in line:
            continue
        to, source = rule.group(1).strip(), rule.group(2)
        if to == f"Anywhere on {nic}" and source == "Anywhere":
            return True
        if to in ("Anywhere", f"Anywhere on {nic}") and _covers(source, ip):
            return True
    return False


def _accepts(line: str, nic: str, ip: ipaddress.IPv4Address) -> bool:
    """An nft or iptables rule that accepts everything from the NIC or from the arm's address."""
    if not re.search(r"\baccept\b|-j ACCEPT", line) or "dport" in line:
        return False
    if re.search(
        rf'\biifname "?{re.escape(nic)}"?(\s|$)|\biif "?{re.escape(nic)}"?(\s|$)|-i {re.escape(nic)}\s', line
    ):
        return True
    return any(_covers(src, ip) for src in re.findall(r"(?:saddr|-s) ([\d./]+)", line))


def _nft_verdict(out: str, nic: str, ip: ipaddress.IPv4Address) -> bool | None:
    drops = re.search(r"hook input[^;]*;[^}]*?policy drop", out)
    if drops is None:
        return None
    return any(_accepts(line, nic, ip) for line in out.splitlines())


def _iptables_verdict(out: str, nic: str, ip: ipaddress.IPv4Address) -> bool | None:
    if not re.search(r"^-P INPUT DROP|^-A INPUT -j (DROP|REJECT)", out, re.MULTILINE):
        return None
    return any(_accepts(line, nic, ip) for line in out.splitlines())


FIREWALLS: list[tuple[str, list[str], Callable[[str, str, ipaddress.IPv4Address], bool | None]]] = [
    ("ufw", ["ufw", "status", "verbose"], _ufw_verdict),
    ("nftables", ["nft", "list", "ruleset"], _nft_verdict),
    ("iptables", ["iptables", "-S"], _iptables_verdict),
]


def check_firewall(system: System, cfg: DoctorConfig) -> CheckResult:
    ip = _fci_address(system, cfg)
    if ip is not None and ip.is_loopback:
        return _ok("firewall", "loopback FCI (franky-sim): no firewall in the way")
    route = _fci_nic(system, ip) if ip is not None else None
    if ip is None or route is None:
        return _skip("firewall", "no FCI NIC to check the firewall for (see fci-nic)")
    read, unreadable = [], []
    for name, argv, verdict in FIREWALLS:
        out = system.run(argv)
        if out is None:
            continue  # not installed
        if out.returncode != 0:
            unreadable.append(f"`sudo {' '.join(argv)}`")
            continue
        lets_in = verdict(out.stdout, route.iface, ip)
        if lets_in is False:
            return _fail(
                "firewall",
                f"{name} drops new incoming traffic and has no rule for {route.iface} or {ip}: "
                "libfranka's UDP state stream from the arm would be dropped",
                f"sudo ufw allow in on {route.iface}"
                if name == "ufw"
                else f"accept input on the FCI NIC, e.g. nft add rule inet filter input iifname "
                f'"{route.iface}" accept',
            )
        read.append(f"{name}: {'inactive' if lets_in is None else f'lets {route.iface} in'}")
        if name == "ufw" and lets_in:
            break  # ufw manages the tables: the rest shows its chains, already judged
    if read:
        return _ok("firewall", "; ".join(read))
    return _skip(
        "firewall",
        "no firewall readable here (ufw, nft, iptables: not installed, or not root)",
        "on the host: "
        + (" and ".join(unreadable) or "sudo nft list ruleset")
        + f"; incoming UDP from {ip} on {route.iface} must be accepted",
    )


# The arm's answer to libfranka's handshake, asked once per doctor run (run_checks): the fci and
# libfranka lines both rest on it, and the FCI takes one client at a time.
_ANSWERS: ContextVar[dict[str, Handshake] | None] = ContextVar("doctor_answers", default=None)


def _arm_answer(system: System, cfg: DoctorConfig) -> Handshake:
    answers = _ANSWERS.get()
    if answers is None:
        return system.franka_handshake(cfg.fci_host, cfg.timeout_s)
    if cfg.fci_host not in answers:
        answers[cfg.fci_host] = system.franka_handshake(cfg.fci_host, cfg.timeout_s)
    return answers[cfg.fci_host]


def check_fci_reachable(system: System, cfg: DoctorConfig) -> CheckResult:
    """PASS only when the arm answered libfranka's handshake: an open TCP port is any program's."""
    error = system.tcp_connect(cfg.fci_host, FCI_PORT, cfg.timeout_s)
    tcp = f"TCP {cfg.fci_host}:{FCI_PORT}"
    if error is None:
        if not cfg.handshake or system.libfranka_version() is None:
            why = "--no-connect" if not cfg.handshake else "franky-control is not installed"
            return _skip(
                "fci",
                f"{tcp} accepts connections, but no arm was asked to answer ({why}): any program may "
                "listen there",
                "run the doctor without --no-connect (robot server stopped), in the robot server's image",
            )
        shake = _arm_answer(system, cfg)
        if shake.outcome in ("ok", "incompatible"):
            sim = " (loopback: a franky-sim, not the arm)" if _is_loopback(system, cfg) else ""
            return _ok("fci", f"{tcp}: the arm answered libfranka's handshake{sim}")
        return _fail(
            "fci",
            f"{tcp} accepts connections, but no arm answered libfranka's handshake ({shake.message})",
            "see the libfranka line; check that fci_host is the control box's FCI address",
        )
    if "refused" in error.lower():
        fix = "the control box answers but the FCI does not listen: in Desk, unlock the joints and "
        fix += "activate FCI (docs/lab-setup.md §8)"
    else:
        fix = f"check the cable to the control box's LAN port and `ping {cfg.fci_host}` (see fci-nic)"
    return _fail("fci", f"{tcp}: {error}", fix)


def _is_loopback(system: System, cfg: DoctorConfig) -> bool:
    ip = _fci_address(system, cfg)
    return ip is not None and ip.is_loopback


def check_libfranka(system: System, cfg: DoctorConfig) -> CheckResult:
    versions = system.libfranka_version()
    if versions is None:
        return _skip("libfranka", "franky-control is not installed", "pip install -e .[robot]")
    franky, libfranka = versions
    ours = f"libfranka {libfranka} (franky-control {franky})"
    if not cfg.handshake:
        return _skip("libfranka", f"{ours}; not connecting (--no-connect)")
    shake = _arm_answer(system, cfg)
    if shake.outcome == "ok":
        return _ok("libfranka", f"{ours}: the arm accepted it and its UDP state stream arrives")
    if shake.outcome == "incompatible":
        return _fail(
            "libfranka",
            f"{ours} refused by the arm: {shake.message}",
            f"the FR3's system version and libfranka must match ({FRANKA_COMPATIBILITY}): update "
            "the arm's system in Desk, or use a franky-control built on a matching libfranka",
        )
    # libfranka's own text cannot tell a wrong route from a busy FCI: the fci-nic check can.
    nic = check_fci_nic(system, cfg)
    if nic.status == "fail":
        return _fail(
            "libfranka",
            f"{ours}: {shake.message}",
            f"the route to the arm is wrong: {nic.detail} (see fci-nic)",
        )
    if shake.outcome == "timeout":
        return _fail(
            "libfranka",
            f"{ours}: {shake.message}",
            "another client may hold the FCI: stop the robot server first "
            "(docker compose -f docker-compose.robot.yml stop robot_server) or run with --no-connect",
        )
    if "UDP" in shake.message:
        fix = "the arm's state stream (UDP) does not arrive: let it through the firewall (see firewall)"
    else:
        fix = "see the fci line; in Desk: joints unlocked, FCI active, no other client connected"
    return _fail("libfranka", f"{ours}: {shake.message}", fix)


# Cameras -----------------------------------------------------------------------------------------


def _usb_realsense(system: System) -> list[tuple[str, str]]:
    """(product, link speed in Mb/s) of each RealSense on the USB bus, read from sysfs."""
    found = []
    for dev in system.list_dir("/sys/bus/usb/devices") or []:
        base = f"/sys/bus/usb/devices/{dev}"
        product = (system.read_text(f"{base}/product") or "").strip()
        if (
            system.read_text(f"{base}/idVendor") or ""
        ).strip() == REALSENSE_VENDOR and "RealSense" in product:
            found.append((product, (system.read_text(f"{base}/speed") or "?").strip()))
    return found


def check_cameras(system: System, cfg: DoctorConfig) -> CheckResult:
    if not cfg.camera_serials:
        return _skip(
            "cameras",
            "no camera serials configured",
            "list them under [robot.realsense_serials] in the robot configuration file (or pass --camera)",
        )
    fix_missing = (
        "plug it in (one USB 3 controller per camera), install Intel's udev rules "
        "(docs/lab-setup.md §2), and check the serial in [robot.realsense_serials] of the robot "
        "configuration file (rs-enumerate-devices -s)"
    )
    fix_usb2 = "move it to a USB 3 port (5000M or more in `lsusb -t`) with a short USB 3 cable"
    cameras = system.realsense_cameras()
    if cameras is None:
        # No pyrealsense2: sysfs gives the link speed but not the camera's serial (the USB serial is
        # another number, librealsense#3663), so only the count and USB 3 can be checked here.
        usb = _usb_realsense(system)
        slow = [
            f"{product} at {speed} Mb/s"
            for product, speed in usb
            if not speed.isdigit() or int(speed) < USB3_MIN_MBPS
        ]
        if slow:
            return _fail("cameras", "not on USB 3: " + ", ".join(slow), fix_usb2)
        if len(usb) < len(cfg.camera_serials):
            return _fail(
                "cameras",
                f"{len(usb)} RealSense on the USB bus (sysfs), {len(cfg.camera_serials)} configured",
                fix_missing,
            )
        return _ok(
            "cameras",
            f"{len(usb)} RealSense on USB 3 (sysfs; pyrealsense2 does not import here, so the serials "
            "are not checked: run the doctor in the robot server's image for them)",
        )
    by_serial = {c.serial: c for c in cameras}
    missing = [f"{n} ({s})" for n, s in cfg.camera_serials.items() if s not in by_serial]
    if missing:
        seen = ", ".join(f"{c.name} {c.serial}" for c in cameras) or "none"
        return _fail("cameras", f"not found: {', '.join(missing)}; pyrealsense2 sees: {seen}", fix_missing)
    found = [(n, by_serial[s]) for n, s in cfg.camera_serials.items()]
    slow = [
        f"{n} ({c.serial}) on USB {c.usb_type or '?'}" for n, c in found if not c.usb_type.startswith("3")
    ]
    if slow:
        return _fail("cameras", "not on USB 3: " + ", ".join(slow), fix_usb2)
    return _ok("cameras", "; ".join(f"{n}: {c.name} {c.serial} on USB {c.usb_type}" for n, c in found))


CHECKS: list[Callable[[System, DoctorConfig], CheckResult]] = [
    check_kernel,
    check_cpu_governor,
    check_rt_priority,
    check_memlock,
    check_fci_nic,
    check_firewall,
    check_fci_reachable,
    check_libfranka,
    check_cameras,
]


def run_checks(system: System, cfg: DoctorConfig) -> list[CheckResult]:
    token = _ANSWERS.set({})
    try:
        return [check(system, cfg) for check in CHECKS]
    finally:
        _ANSWERS.reset(token)
