"""``pde doctor``: each check passing and failing against a fake robot PC (tests/fakes/fake_system.py,
the machine this suite runs on has no RT kernel, FR3 or camera), and the real HostSystem against
franky-sim on loopback for the FCI and libfranka checks."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from pde.doctor.checks import (
    DoctorConfig,
    check_cameras,
    check_cpu_governor,
    check_fci_nic,
    check_fci_reachable,
    check_firewall,
    check_kernel,
    check_libfranka,
    check_memlock,
    check_rt_priority,
    parse_routes,
    run_checks,
)
from pde.doctor.main import main
from pde.doctor.system import CameraFound, CommandOutput, Handshake, HostSystem
from tests.fakes.fake_system import FCI_HOST, ROUTE_HEADER, SERIALS, FakeSystem, ready_robot_pc, route_line

CFG = DoctorConfig(fci_host=FCI_HOST, camera_serials=SERIALS)


def test_a_ready_robot_pc_passes_every_check(capsys: pytest.CaptureFixture[str]) -> None:
    results = run_checks(ready_robot_pc(), CFG)
    assert [r.status for r in results] == ["pass"] * len(results), results
    argv = ["--fci-host", FCI_HOST, "--camera", f"external={SERIALS['external']}"]
    assert main([*argv, "--camera", f"wrist={SERIALS['wrist']}"], system=ready_robot_pc()) == 0
    out = capsys.readouterr().out
    assert "0 failed, 0 skipped, 9 passed" in out
    assert "PASS  cameras" in out and "wrist: Intel RealSense D405 234567890123 on USB 3.2" in out


def test_any_failure_makes_the_exit_code_non_zero(capsys: pytest.CaptureFixture[str]) -> None:
    pc = ready_robot_pc()
    pc.rlimits["memlock"] = (64 * 1024, 64 * 1024)
    assert main(["--fci-host", FCI_HOST, "--camera", "wrist=234567890123"], system=pc) == 1
    out = capsys.readouterr().out
    assert "FAIL  memlock" in out and "fix: in compose: ulimits memlock -1" in out
    assert "1 failed, 0 skipped, 8 passed" in out


def test_a_malformed_camera_argument_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--camera", "wrist"], system=ready_robot_pc())
    assert e.value.code == 2
    assert "'wrist': use NAME=SERIAL" in capsys.readouterr().err


# kernel


def test_kernel_realtime_flag_or_mainline_preempt_rt() -> None:
    pc = ready_robot_pc()
    assert check_kernel(pc, CFG).detail == "6.12.43+deb13-rt-amd64, PREEMPT_RT (/sys/kernel/realtime = 1)"
    del pc.files["/sys/kernel/realtime"]  # mainline 6.12+ RT kernels have no such file
    result = check_kernel(pc, CFG)
    assert result.status == "pass" and "PREEMPT_RT (uname -v" in result.detail
    assert "libfranka 0.21's own check reads" in result.detail
    pc.version = "#1 SMP PREEMPT_DYNAMIC Debian 6.12.43-1"
    pc.release = "6.12.43+deb13-amd64"
    result = check_kernel(pc, CFG)
    assert result.status == "fail" and "6.12.43+deb13-amd64 is not PREEMPT_RT" in result.detail
    assert "apt install linux-image-rt-amd64" in result.fix


def test_cpu_governor() -> None:
    pc = ready_robot_pc()
    pc.files["/sys/devices/system/cpu/cpu2/cpufreq/scaling_governor"] = "powersave\n"
    result = check_cpu_governor(pc, CFG)
    assert result.status == "fail" and "1 of 4 CPUs not on 'performance' (cpu2: powersave)" in result.detail
    assert "cpupower frequency-set -g performance" in result.fix
    assert check_cpu_governor(FakeSystem(), CFG).status == "skip"


# limits


def test_rt_priority_needs_rtprio_99_or_cap_sys_nice() -> None:
    pc = ready_robot_pc()
    pc.rlimits["rtprio"] = (0, 0)
    result = check_rt_priority(pc, CFG)
    assert result.status == "fail" and "RLIMIT_RTPRIO 0 and no CAP_SYS_NICE" in result.detail
    assert "cap_add [SYS_NICE]" in result.fix and "99-realtime.conf" in result.fix
    pc.rlimits["rtprio"] = (80, 99)  # the compose file's old default priority would not be enough
    assert check_rt_priority(pc, CFG).status == "fail"
    pc.files["/proc/self/status"] = "CapEff:\t00000000a88425fb\n"  # docker's default set + SYS_NICE (bit 23)
    assert check_rt_priority(pc, CFG).status == "pass"
    pc.files["/proc/self/status"] = "CapEff:\t00000000a80425fb\n"  # docker's default set
    assert check_rt_priority(pc, CFG).status == "fail"


def test_rt_priority_fails_where_the_kernel_refuses_what_the_limits_allow() -> None:
    """CAP_SYS_NICE (or RLIMIT_RTPRIO 99) is not enough where the kernel schedules real-time time
    by cgroup and the container's cgroup has none: measured in podman on a CONFIG_RT_GROUP_SCHED
    kernel (docker/check_images.py), where the check used to PASS."""
    pc = ready_robot_pc()
    pc.files["/proc/self/status"] = "CapEff:\t00000000a88425fb\n"  # docker's default set + SYS_NICE
    assert "a thread switched to SCHED_FIFO 99" in check_rt_priority(pc, CFG).detail
    pc.sched_fifo_refused = "[Errno 1] Operation not permitted"
    pc.files["/sys/fs/cgroup/cpu/cpu.rt_runtime_us"] = "0\n"
    result = check_rt_priority(pc, CFG)
    assert result.status == "fail"
    assert "CAP_SYS_NICE held" in result.detail and "Operation not permitted" in result.detail
    assert "0 µs of real-time time" in result.detail and "CONFIG_RT_GROUP_SCHED" in result.detail
    assert "cpu_rt_runtime" in result.fix and "--cpu-rt-runtime" in result.fix
    pc.files["/proc/self/status"] = "CapEff:\t00000000a80425fb\n"  # no SYS_NICE: RLIMIT_RTPRIO 99
    pc.rlimits["rtprio"] = (99, 99)
    assert check_rt_priority(pc, CFG).status == "fail"
    pc.sched_fifo_refused = None
    assert check_rt_priority(pc, CFG).status == "pass"


def test_memlock() -> None:
    pc = ready_robot_pc()
    assert check_memlock(pc, CFG).detail == "RLIMIT_MEMLOCK unlimited"
    pc.rlimits["memlock"] = (102400 * 1024, 102400 * 1024)
    assert check_memlock(pc, CFG).status == "pass"
    pc.rlimits["memlock"] = (8192 * 1024, 8192 * 1024)
    result = check_memlock(pc, CFG)
    assert result.status == "fail" and result.detail == (
        "RLIMIT_MEMLOCK 8192 kB, below the 102400 kB Franka asks for"
    )


# network


def test_routes_are_read_as_the_kernel_writes_them() -> None:
    # /proc/net/route of the machine these tests were written on; `ip route` there said
    # "default via 192.0.2.1 dev eth0" and "192.0.2.0/24 dev eth0".
    text = (
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
        "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
    )
    default, local = parse_routes(text)
    assert (str(default.network), str(default.gateway)) == ("0.0.0.0/0", "192.0.2.1")
    assert (str(local.network), local.gateway) == ("192.0.2.0/24", None)
    assert parse_routes(route_line("enp3s0", "172.16.0.0/24"))[0:0] == []  # header-less: skipped line
    assert str(parse_routes(ROUTE_HEADER + "\n" + route_line("enp3s0", "172.16.0.0/24"))[0].network) == (
        "172.16.0.0/24"
    )


def _with_routes(pc: FakeSystem, *lines: str) -> FakeSystem:
    pc.files["/proc/net/route"] = "\n".join([ROUTE_HEADER, *lines]) + "\n"
    return pc


def test_fci_nic() -> None:
    pc = ready_robot_pc()
    assert check_fci_nic(pc, CFG).detail == (
        "172.16.0.2 on enp3s0 (172.16.0.0/24, directly connected, 1000 Mb/s)"
    )
    # No address on the arm's subnet: the default route would take it to the lab's gateway.
    _with_routes(
        pc, route_line("eno1", "0.0.0.0/0", gateway="192.168.1.1"), route_line("eno1", "192.168.1.0/24")
    )
    result = check_fci_nic(pc, CFG)
    assert result.status == "fail" and "reached through the gateway 192.168.1.1 on eno1" in result.detail
    assert "nmcli con add" in result.fix
    _with_routes(pc, route_line("eno1", "192.168.1.0/24"))
    assert "no route to 172.16.0.2" in check_fci_nic(pc, CFG).detail
    # The FCI on the NIC that also carries the default route (through a switch, with the lab).
    _with_routes(
        pc, route_line("eno1", "0.0.0.0/0", gateway="172.16.0.254"), route_line("eno1", "172.16.0.0/24")
    )
    pc.files["/sys/class/net/eno1/operstate"] = "up\n"
    result = check_fci_nic(pc, CFG)
    assert result.status == "fail" and "also carries the default route" in result.detail
    pc = ready_robot_pc()
    pc.files["/sys/class/net/enp3s0/operstate"] = "down\n"
    result = check_fci_nic(pc, CFG)
    assert result.status == "fail" and "enp3s0 (172.16.0.0/24), which is down" in result.detail
    assert check_fci_nic(pc, dataclasses.replace(CFG, fci_host="127.4.5.6")).status == "pass"
    assert "does not resolve" in check_fci_nic(pc, dataclasses.replace(CFG, fci_host="fr3.lab")).detail


def _firewall(**outputs: CommandOutput) -> FakeSystem:
    """A ready PC whose only readable firewall tool is each keyword's: ufw, nft or iptables."""
    argv = {"ufw": "ufw status verbose", "nft": "nft list ruleset", "iptables": "iptables -S"}
    pc = ready_robot_pc()
    pc.commands = {argv[tool]: out for tool, out in outputs.items()}
    return pc


UFW_DENY = (
    "Status: active\nDefault: deny (incoming), allow (outgoing), disabled (routed)\n\n"
    "To                         Action      From\n--                         ------      ----\n"
    "22/tcp                     ALLOW IN    Anywhere\n"
)
NFT_DROP = """table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iif "lo" accept
		iifname "enp3s0" tcp dport 22 accept
	}
}
"""


def test_firewall_ufw() -> None:
    result = check_firewall(_firewall(ufw=CommandOutput(0, UFW_DENY, "")), CFG)
    assert result.status == "fail" and "ufw drops new incoming traffic" in result.detail
    assert "UDP state stream" in result.detail and result.fix == "sudo ufw allow in on enp3s0"
    from_arm = UFW_DENY + "Anywhere                   ALLOW IN    172.16.0.0/24\n"
    assert check_firewall(_firewall(ufw=CommandOutput(0, from_arm, "")), CFG).status == "pass"
    assert check_firewall(ready_robot_pc(), CFG).detail == "ufw: lets enp3s0 in"
    inactive = CommandOutput(0, "Status: inactive\n", "")
    assert check_firewall(_firewall(ufw=inactive), CFG).detail == "ufw: inactive"


def test_firewall_nftables_and_iptables() -> None:
    result = check_firewall(_firewall(nft=CommandOutput(0, NFT_DROP, "")), CFG)
    assert result.status == "fail" and "nftables drops" in result.detail  # a port rule is not enough
    assert 'iifname "enp3s0" accept' in result.fix
    opened = NFT_DROP.replace("\t}\n}", '\t\tiifname "enp3s0" accept\n\t}\n}')
    assert check_firewall(_firewall(nft=CommandOutput(0, opened, "")), CFG).status == "pass"
    rules = "-P INPUT DROP\n-A INPUT -i lo -j ACCEPT\n"
    assert check_firewall(_firewall(iptables=CommandOutput(0, rules, "")), CFG).status == "fail"
    rules += "-A INPUT -s 172.16.0.2/32 -j ACCEPT\n"
    assert check_firewall(_firewall(iptables=CommandOutput(0, rules, "")), CFG).status == "pass"
    # ufw active and open on the NIC: its own chains, as iptables and nft list them, are not judged
    # again (`iptables -S` shows INPUT's DROP policy and jumps into ufw's chains).
    ufw_tables = (
        "-P INPUT DROP\n-A INPUT -j ufw-before-logging-input\n-A ufw-user-input -i enp3s0 -j ACCEPT\n"
    )
    pc = _firewall(
        ufw=ready_robot_pc().commands["ufw status verbose"], iptables=CommandOutput(0, ufw_tables, "")
    )
    assert check_firewall(pc, CFG).detail == "ufw: lets enp3s0 in"


def test_firewall_unreadable_is_a_skip_that_says_how_to_look() -> None:
    denied = CommandOutput(1, "", "netlink: Error: Operation not permitted")
    result = check_firewall(_firewall(nft=denied), CFG)
    assert result.status == "skip" and "`sudo nft list ruleset`" in result.fix
    assert "incoming UDP from 172.16.0.2 on enp3s0" in result.fix
    assert check_firewall(_firewall(), CFG).status == "skip"  # no firewall tool at all (a container)


def test_fci_reachable() -> None:
    pc = ready_robot_pc()
    assert (
        check_fci_reachable(pc, CFG).detail == "TCP 172.16.0.2:1337: the arm answered libfranka's handshake"
    )
    pc.tcp_errors[(FCI_HOST, 1337)] = "Connection refused"
    result = check_fci_reachable(pc, CFG)
    assert result.status == "fail" and "activate FCI" in result.fix
    pc.tcp_errors[(FCI_HOST, 1337)] = "no answer within 5 s"
    assert "ping 172.16.0.2" in check_fci_reachable(pc, CFG).fix


def test_no_pass_for_fci_without_an_answer_from_the_arm(capsys: pytest.CaptureFixture[str]) -> None:
    # Something listens on 1337 but no arm answers libfranka: the port alone is no pass.
    pc = ready_robot_pc()
    pc.handshake = Handshake("timeout", "no answer within 15 s")
    result = check_fci_reachable(pc, CFG)
    assert result.status == "fail" and "no arm answered libfranka's handshake" in result.detail, result
    # Not asked (--no-connect, or no franky-control): a skip that says why, never a pass.
    pc.handshakes.clear()
    result = check_fci_reachable(pc, dataclasses.replace(CFG, handshake=False))
    assert result.status == "skip" and "--no-connect" in result.detail and pc.handshakes == []
    pc.libfranka = None
    assert check_fci_reachable(pc, CFG).status == "skip"
    # A whole run asks the arm once for both lines.
    pc = ready_robot_pc()
    pc.handshake = Handshake("timeout", "no answer within 15 s")
    argv = ["--fci-host", FCI_HOST, "--camera", f"external={SERIALS['external']}"]
    assert main([*argv, "--camera", f"wrist={SERIALS['wrist']}"], system=pc) == 1
    out = capsys.readouterr().out
    assert "PASS  fci  " not in out and "FAIL  fci  " in out and pc.handshakes == [FCI_HOST]


def test_libfranka_names_a_routing_problem_rather_than_another_client() -> None:
    pc = ready_robot_pc()
    pc.handshake = Handshake("timeout", "no answer within 15 s")
    assert "another client may hold the FCI" in check_libfranka(pc, CFG).fix  # the route is right
    _with_routes(
        pc, route_line("eno1", "0.0.0.0/0", gateway="192.168.1.1"), route_line("eno1", "192.168.1.0/24")
    )
    result = check_libfranka(pc, CFG)
    assert result.status == "fail" and "another client" not in result.fix, result
    assert result.fix == (
        "the route to the arm is wrong: 172.16.0.2 is reached through the gateway 192.168.1.1 on eno1 "
        "(see fci-nic)"
    )


def test_libfranka_against_the_arm() -> None:
    pc = ready_robot_pc()
    assert check_libfranka(pc, CFG).detail == (
        "libfranka 0.21.2 (franky-control 2.0.0): the arm accepted it and its UDP state stream arrives"
    )
    pc.handshake = Handshake(
        "incompatible", "libfranka: Incompatible library version (server version: 9, library version: 10)."
    )
    result = check_libfranka(pc, CFG)
    assert result.status == "fail" and "server version: 9, library version: 10" in result.detail
    assert "compatibility.html" in result.fix
    pc.handshake = Handshake("error", "NetworkException: libfranka: UDP receive: Timeout")
    assert "firewall" in check_libfranka(pc, CFG).fix
    pc.handshake = Handshake("timeout", "no answer within 15 s")
    assert "stop the robot server first" in check_libfranka(pc, CFG).fix
    pc.handshakes.clear()
    result = check_libfranka(pc, dataclasses.replace(CFG, handshake=False))
    assert result.status == "skip" and pc.handshakes == []  # --no-connect: nothing connects
    pc.libfranka = None
    assert check_libfranka(pc, CFG).status == "skip"


# cameras


def test_cameras_by_serial_through_pyrealsense2() -> None:
    pc = ready_robot_pc()
    assert pc.cameras is not None
    pc.cameras[1] = CameraFound(SERIALS["wrist"], "Intel RealSense D405", "2.1")
    result = check_cameras(pc, CFG)
    assert result.status == "fail" and "wrist (234567890123) on USB 2.1" in result.detail
    assert "USB 3 port" in result.fix
    pc.cameras.pop()
    result = check_cameras(pc, CFG)
    assert result.status == "fail" and "not found: wrist (234567890123)" in result.detail
    assert "pyrealsense2 sees: Intel RealSense D435 123456789012" in result.detail
    assert "udev rules" in result.fix
    assert check_cameras(pc, DoctorConfig(fci_host=FCI_HOST)).status == "skip"


def test_cameras_through_sysfs_without_pyrealsense2() -> None:
    pc = ready_robot_pc()
    pc.cameras = None
    for dev, product, speed in (
        ("2-1", "Intel(R) RealSense(TM) Depth Camera 435", "5000"),
        ("2-2", "Intel(R) RealSense(TM) Depth Camera 405", "480"),
        ("1-4", "Intel(R) Wireless Bluetooth(R)", "12"),
    ):
        base = f"/sys/bus/usb/devices/{dev}"
        pc.files |= {f"{base}/idVendor": "8086\n", f"{base}/product": product, f"{base}/speed": speed}
    result = check_cameras(pc, CFG)
    assert result.status == "fail" and result.detail == (
        "not on USB 3: Intel(R) RealSense(TM) Depth Camera 405 at 480 Mb/s"
    )
    pc.files["/sys/bus/usb/devices/2-2/speed"] = "10000"
    result = check_cameras(pc, CFG)
    assert result.status == "pass" and "2 RealSense on USB 3 (sysfs" in result.detail
    del pc.files["/sys/bus/usb/devices/2-2/idVendor"]
    assert "1 RealSense on the USB bus (sysfs), 2 configured" in check_cameras(pc, CFG).detail


# the real System


def test_host_system_reads_this_machine() -> None:
    system = HostSystem()
    release, _ = system.uname()
    assert release
    assert all(isinstance(v, int) for v in system.rlimit("rtprio") + system.rlimit("memlock"))
    threads = threading.active_count()
    refused = system.sched_fifo_error(1)  # this machine's answer, either way; its thread is gone
    assert refused is None or "Operation not permitted" in refused
    assert threading.active_count() == threads
    assert system.run(["no-such-program-pde-doctor"]) is None
    assert system.read_text("/no/such/file") is None
    assert system.libfranka_version() == ("2.0.0", "0.21.2")  # franky-control's bundled libfranka


def test_fci_and_libfranka_against_franky_sim() -> None:
    from robot_server.robots.franka.fci_sim import FciSim
    from tests.robot_server.franka.conftest import unused_loopback

    system = HostSystem()
    with FciSim(realtime=True) as sim:
        cfg = DoctorConfig(fci_host=sim.host, timeout_s=10.0)
        assert check_fci_reachable(system, cfg).status == "pass"
        result = check_libfranka(system, cfg)
        assert result.status == "pass", result
        # A second client while one holds the FCI: franky-sim never answers it, and the doctor
        # gives up after its deadline instead of hanging.
        import franky

        held = franky.Robot(sim.host, realtime_config=franky.RealtimeConfig.Ignore)
        result = check_libfranka(system, dataclasses.replace(cfg, timeout_s=0.5))
        assert result.status == "fail" and "no answer within 5.5 s" in result.detail, result
        assert "stop the robot server first" in result.fix
        del held
    closed = DoctorConfig(fci_host=unused_loopback(), timeout_s=2.0)
    result = check_fci_reachable(system, closed)
    assert result.status == "fail" and "refused" in result.detail.lower() and "activate FCI" in result.fix
    result = check_libfranka(system, closed)
    assert result.status == "fail" and "refused" in result.detail, result


def test_the_doctor_reads_the_robot_servers_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What compose gives the robot server's container (docker-compose.robot.yml) is what the doctor
    # checks, with no flags: `docker compose ... run --rm robot_server doctor`.
    monkeypatch.setenv("PDE_ROBOT_FCI_HOST", FCI_HOST)
    monkeypatch.setenv("PDE_ROBOT_REALSENSE_SERIALS", '{"external": "123456789012", "wrist": "999"}')
    assert main([], system=ready_robot_pc()) == 1
    assert "not found: wrist (999)" in capsys.readouterr().out
    monkeypatch.setenv("PDE_ROBOT_FCI_HOST", "")  # the franka backend's own default, 172.16.0.2
    monkeypatch.setenv("PDE_ROBOT_REALSENSE_SERIALS", "{}")
    pc = ready_robot_pc()
    assert main([], system=pc) == 0 and pc.handshakes == [FCI_HOST]
    assert "SKIP  cameras       no camera serials configured" in capsys.readouterr().out
    monkeypatch.setenv("PDE_ROBOT_REALSENSE_SERIALS", "wrist")
    assert main([], system=ready_robot_pc()) == 2
    assert "pde doctor: the robot server's settings do not load" in capsys.readouterr().err
