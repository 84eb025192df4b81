"""`pde robot-server --backend sim` as a real subprocess, driven by RobotClient.

Stated tolerances: in realtime pacing at 10 Hz, a chunk moving the TCP at 0.1 m/s tracks its
per-row targets within 10 mm while moving and ends within 3 mm of the last target; the watchdog
drops the chunk no earlier than 200 ms after the last client message and long before the chunk's
end (its latency is bench/bench_watchdog.py's to measure), and the arm has stopped (< 3 mm
further) 200 ms after that.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
import pytest
import zmq

from pde_contract.client import RobotClient, RobotServerError
from pde_contract.codec import unpackb
from pde_contract.messages import (
    MAX_COMMAND_BYTES,
    ActionChunk,
    ActionSpace,
    ErrorCode,
    Observation,
    Reply,
    RobotFault,
)
from robot_server.safety import FR3_JOINT_LOWER_RAD, FR3_JOINT_UPPER_RAD, SafetyLimits
from tests.helpers import free_port, pde_command, subprocess_env

LIMITS = SafetyLimits()
STARTUP_TIMEOUT_S = 90.0


@dataclass
class ServerProc:
    proc: subprocess.Popen[str]
    cmd_port: int
    obs_port: int
    lines: list[str]
    pump: threading.Thread

    @property
    def cmd_endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.cmd_port}"

    def stop(self, timeout_s: float = 15.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout_s)
            self.pump.join(5)  # the last lines of output
            return rc
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            raise AssertionError(f"robot-server did not stop within {timeout_s} s after SIGTERM") from None


def start_server(
    *extra: str, cmd_port: int | None = None, obs_port: int | None = None, env: dict[str, str] | None = None
) -> ServerProc:
    cmd_port = cmd_port or free_port()
    obs_port = obs_port or free_port()
    proc = subprocess.Popen(
        pde_command(
            "robot-server",
            "--backend",
            "sim",
            "--cmd-port",
            str(cmd_port),
            "--obs-port",
            str(obs_port),
            *extra,
        ),
        env=subprocess_env(MUJOCO_GL="egl", **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("robot-server ready"):
                ready.set()

    pump_thread = threading.Thread(target=pump, daemon=True)
    pump_thread.start()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not ready.wait(0.1):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("robot-server did not start:\n" + "".join(lines))
    return ServerProc(proc, cmd_port, obs_port, lines, pump_thread)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProc]:
    srv = start_server()
    yield srv
    assert srv.stop() == 0, "".join(srv.lines)


@pytest.fixture
def client(server: ServerProc) -> Iterator[RobotClient]:
    with RobotClient(server.cmd_endpoint, name="sim-test", timeout_s=5.0) as c:
        c.connect()
        c.release_estop()
        c.reset(seed=0)
        yield c
        c.stop()


_episode = iter(range(10**6))


def ee_chunk(
    rows: int, delta: tuple[float, float, float], gripper_m: float = 0.08, seq: int = 0
) -> ActionChunk:
    a = np.zeros((rows, 7))
    a[:, :3] = delta
    a[:, 6] = gripper_m
    return ActionChunk(
        seq=seq,
        episode_id=f"ep{next(_episode)}",
        action_space=ActionSpace.EE_DELTA,
        actions=a,
        control_rate_hz=10.0,
    )


def collect(client: RobotClient, seconds: float) -> list[Observation]:
    out = []
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        out.append(client.latest_observation(timeout_s=2.0))
    return out


def assert_within_limits(observations: list[Observation], tol_m: float = 0.01) -> None:
    lo, hi = np.array(LIMITS.workspace_min_m), np.array(LIMITS.workspace_max_m)
    for o in observations:
        q = o.state.joint_positions_rad
        assert np.all(q >= FR3_JOINT_LOWER_RAD) and np.all(q <= FR3_JOINT_UPPER_RAD), q
        p = o.state.ee_position_m
        assert np.all(p >= lo - tol_m) and np.all(p <= hi + tol_m), (p, o.episode_id, o.steps_remaining)
        # Commanded widths are clipped to [0, 0.08] m. Measured width only away from the table:
        # fingertips pressed on the table are pushed apart by contact in the sim.
        if p[2] > 0.05:
            assert -1e-3 <= o.state.gripper_width_m <= 0.08 + 2e-3, o.state.gripper_width_m


def test_hello_health_and_stream(client: RobotClient) -> None:
    info = client.connect()
    assert info.backend == "sim" and info.cameras == ["external", "wrist"]
    deadline = time.monotonic() + 5
    while not (h := client.health()).ok:
        assert time.monotonic() < deadline, h.detail
        time.sleep(0.05)
    time.sleep(1.5)  # the rate is measured over the ticks since the fixture's reset
    # Reported near the configured 10 Hz, never above it; ticks run late on a loaded machine (8.9 Hz
    # at load 20 on 2 cores), and the rate's precision is bench_chunk_gap's business, not a test's.
    assert 7.0 < client.health().control_loop_hz < 11.0
    obs = collect(client, 1.0)
    # a live stream (~30 fps when quiet); its rate is a benchmark's business (bench/bench_transport.py),
    # a loaded CI machine delivers fewer
    assert len(obs) >= 5
    frame = obs[-1].cameras[0]
    assert frame.jpeg[:2] == b"\xff\xd8" and (frame.width, frame.height) == (224, 224)


def test_chunk_tracking(client: RobotClient) -> None:
    start = client.status().state
    assert start is not None
    chunk = ee_chunk(10, (0.01, 0.0, -0.005))  # 0.11 m/s
    client.start_heartbeat()
    acc = client.submit_chunk(chunk)
    assert acc.steps == 10 and acc.steps_clipped == 0
    seen = collect(client, 1.5)
    client.stop_heartbeat()
    errors = []
    for o in seen:
        if o.last_chunk_seq == chunk.seq and o.executing_chunk_seq == chunk.seq:
            row = 10 - o.steps_remaining - 1  # rows executed so far - 1
            target = start.ee_position_m + (row + 1) * np.array([0.01, 0.0, -0.005])
            errors.append(np.linalg.norm(o.state.ee_position_m - target))
    assert len(errors) >= 3  # observations along the 1 s chunk (~30 fps when quiet, fewer under load)
    assert max(errors) < 0.010, f"tracking error along the chunk {max(errors) * 1e3:.1f} mm"
    final = client.status().state
    assert final is not None
    expected = start.ee_position_m + 10 * np.array([0.01, 0.0, -0.005])
    assert np.linalg.norm(final.ee_position_m - expected) < 0.003
    # the arm holds after the chunk ran out
    time.sleep(0.3)
    held = client.status().state
    assert held is not None and np.linalg.norm(held.ee_position_m - final.ee_position_m) < 0.001
    c = client.status().counters
    assert c.watchdog_trips == 0


def _raw(endpoint: str, frames: list[bytes]) -> Reply:
    ctx: zmq.Context = zmq.Context.instance()
    with ctx.socket(zmq.DEALER) as s:
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        s.send_multipart(frames)
        assert s.poll(5000), "no reply: the server must answer every message"
        return unpackb(s.recv(), Reply)


def test_bad_inputs_get_clear_errors_and_the_arm_stays_in_limits(
    server: ServerProc, client: RobotClient
) -> None:
    client.start_heartbeat()
    before = client.status().counters
    nan = ee_chunk(5, (0.0, 0.0, 0.0))
    nan.actions[1, 3] = np.nan
    inf = ee_chunk(5, (0.0, 0.0, 0.0))
    inf.actions[0, 0] = np.inf
    wrong_shape = ActionChunk(
        seq=0,
        episode_id="x",
        action_space=ActionSpace.EE_DELTA,
        actions=np.zeros((5, 6)),
        control_rate_hz=10.0,
    )
    wrong_rate = ee_chunk(5, (0.0, 0.0, 0.0))
    wrong_rate.control_rate_hz = 15.0
    for bad, words in ((nan, "NaN"), (inf, "NaN/inf"), (wrong_shape, "[T, 7]"), (wrong_rate, "resample")):
        with pytest.raises(RobotServerError) as ei:
            client.submit_chunk(bad)
        assert ei.value.code is ErrorCode.INVALID_ACTION and words in ei.value.message
    with pytest.raises(RobotServerError, match="outside") as ei:
        client.gripper(0.2)
    assert ei.value.code is ErrorCode.INVALID_ACTION
    r = _raw(server.cmd_endpoint, [b"x" * (MAX_COMMAND_BYTES + 10)])
    assert r.code is ErrorCode.TOO_LARGE
    r = _raw(server.cmd_endpoint, [b"\x00\x01garbage"])
    assert r.code is ErrorCode.MALFORMED
    r = _raw(server.cmd_endpoint, [msgspec.msgpack.encode({"request_id": 1, "request": {"type": "Fly"}})])
    assert r.code is ErrorCode.UNKNOWN_COMMAND
    bad_space = {
        "request_id": 2,
        "request": {
            "type": "SubmitChunk",
            "chunk": {
                "type": "ActionChunk",
                "seq": 0,
                "episode_id": "x",
                "action_space": "torque",
                "actions": None,
                "control_rate_hz": 10.0,
            },
        },
    }
    r = _raw(server.cmd_endpoint, [msgspec.msgpack.encode(bad_space)])
    assert r.code is ErrorCode.INVALID_ACTION and "ee_delta" in r.message
    # Nothing above moved the arm.
    st = client.status()
    assert st.executing_chunk_seq == -1
    c = st.counters
    assert c.chunks_rejected - before.chunks_rejected == 5
    assert c.commands_too_large - before.commands_too_large == 1
    assert c.commands_malformed - before.commands_malformed == 1
    assert c.commands_unknown - before.commands_unknown == 1

    # Targets beyond the limits are clipped per step: down through the table, far sideways, and
    # joint targets past every limit. The arm never leaves its limits.
    seen: list[Observation] = []
    for i, chunk in enumerate(
        (
            ee_chunk(15, (0.0, 0.5, 0.0), seq=0),  # sideways, out of the box
            ee_chunk(15, (0.0, 0.0, 0.3), seq=0),  # up, out of the box
            ee_chunk(15, (0.0, 0.0, -0.3), seq=0),  # down, through the table
        )
    ):
        acc = client.submit_chunk(chunk)
        assert acc.steps_clipped == 15, i  # every row asks for more than 5 cm per tick
        assert "clipped" in (client.last_reply.message if client.last_reply else "")
        seen += collect(client, 1.7)
    joints = np.zeros((10, 8))
    joints[:, :7] = FR3_JOINT_UPPER_RAD + 0.5
    joints[:, 7] = 0.08
    acc = client.submit_chunk(
        ActionChunk(
            seq=0,
            episode_id="joints",
            action_space=ActionSpace.JOINT_ABS,
            actions=joints,
            control_rate_hz=10.0,
        )
    )
    assert acc.steps_clipped == 10
    seen += collect(client, 1.2)
    client.stop_heartbeat()
    assert len(seen) > 10  # the limits are checked on every observation seen
    assert_within_limits(seen)
    assert min(o.state.ee_position_m[2] for o in seen) > -0.005  # never through the table
    assert client.status().counters.steps_clipped - before.steps_clipped == 55
    assert client.health().ok  # still serving


def _run_until_silent(client: RobotClient, seq: int) -> tuple[float, float] | None:
    """Start a 4 s chunk, keep the client alive for 0.5 s, then fall silent. Returns the wall
    times around the last message (sent, answered): the server saw it in between. None when this
    test thread itself stalled for longer than 120 ms (a starved CI machine), so the watchdog may
    have tripped early for a reason of its own."""
    before = client.status().counters.watchdog_trips
    client.submit_chunk(ee_chunk(40, (0.0, 0.008 if seq % 2 == 0 else -0.008, 0.0)))  # 0.08 m/s
    t_end = time.monotonic() + 0.5
    last = time.monotonic()
    while time.monotonic() < t_end:  # a live client: a heartbeat every 50 ms
        client.heartbeat()
        now = time.monotonic()
        if now - last > 0.12:
            return None
        last = now
        time.sleep(0.05)
    # The status request is a message too: the heartbeat after it is the last one.
    if client.status().counters.watchdog_trips != before or time.monotonic() - last > 0.12:
        return None
    t_sent = time.time()
    client.heartbeat()
    t_answered = time.time()  # the client falls silent here
    if t_answered - t_sent > 0.05:
        return None
    return t_sent, t_answered


def test_watchdog_stops_the_arm(client: RobotClient) -> None:
    # Each attempt takes ~2 s; a starved one is judged by nobody, so a loaded machine gets more tries
    # (a CI run at load 15 on 2 cores starved 3 in a row).
    for attempt in range(6):
        silent = _run_until_silent(client, attempt)
        if silent is not None:
            seen = collect(client, 1.0)
            # A server that published under half its 30 observations a second was starved too:
            # its trip shows up late for a reason of its own.
            if seen[-1].seq - seen[0].seq >= 15:
                break
        client.stop()
        client.reset(seed=0)
    else:
        pytest.fail("this machine starved the test or the server in 6 attempts; cannot judge the watchdog")
    t_sent, t_answered = silent
    trip = next(o for o in seen if o.executing_chunk_seq == -1)
    # The watchdog, not the chunk's end (3.5 s later), stopped it, and not before the timeout. How
    # late after the 200 ms is a latency, measured by bench/bench_watchdog.py, not asserted here:
    # a loaded CI machine may delay the control thread for any time.
    late_ms = (trip.publish_time_s - t_answered) * 1000
    print(f"watchdog dropped the chunk {late_ms:.0f} ms after the last message")
    assert trip.publish_time_s - t_answered < 2.0, "the chunk was not dropped by the watchdog"
    assert trip.publish_time_s - t_sent >= 0.19, "watchdog tripped before the timeout"
    assert client.status().counters.watchdog_trips >= 1
    # The arm stopped: 200 ms after the trip it no longer moves.
    settled = [o for o in seen if o.publish_time_s >= trip.publish_time_s + 0.2]
    assert settled, "no observations after the trip"
    ys = [o.state.ee_position_m[1] for o in settled]
    assert max(ys) - min(ys) < 0.003, f"arm still moving: {ys}"
    moved_before = [o.state.ee_position_m[1] for o in seen if o.publish_time_s < trip.publish_time_s]
    assert moved_before and max(moved_before) - min(moved_before) > 0.005  # it was moving


def assert_motion_refused(client: RobotClient, code: ErrorCode, says: str) -> None:
    """A chunk, a reset and a gripper command are each refused with ``code``, saying ``says``."""
    for call in (
        lambda: client.submit_chunk(ee_chunk(5, (0.0, 0.01, 0.0))),
        lambda: client.reset(),
        lambda: client.gripper(0.01),
    ):
        with pytest.raises(RobotServerError) as ei:
            call()
        assert ei.value.code is code and says in ei.value.message, ei.value.message


def test_an_estop_survives_a_kill_and_the_next_chunk_is_refused(tmp_path: Path) -> None:
    env = {"PDE_DATA_DIR": str(tmp_path)}
    first = start_server(env=env)
    try:
        with RobotClient(first.cmd_endpoint, name="sim-test", timeout_s=5.0) as c:
            c.connect()
            c.estop("operator pressed e-stop on the page")  # acknowledged: on disk now
    finally:
        first.proc.kill()  # kill -9: no clean shutdown writes anything
        first.proc.wait(15)
        first.pump.join(5)
    second = start_server(env=env)
    try:
        with RobotClient(second.cmd_endpoint, name="sim-test", timeout_s=5.0) as c:
            c.connect()
            st = c.status()
            assert st.estopped and "operator pressed e-stop on the page" in st.estop_reason
            assert "before the robot server restarted" in st.estop_reason
            assert c.latest_observation(timeout_s=10.0).estopped  # what the page shows
            assert_motion_refused(c, ErrorCode.ESTOPPED, "release_estop")
            c.release_estop()
            assert c.submit_chunk(ee_chunk(5, (0.0, 0.01, 0.0))).steps == 5
    finally:
        assert second.stop() == 0, "".join(second.lines)


def test_estop_holds_until_released(client: RobotClient) -> None:
    client.start_heartbeat()
    client.submit_chunk(ee_chunk(30, (0.0, -0.008, 0.0)))
    time.sleep(0.4)
    client.estop("test")
    time.sleep(0.3)  # stopping
    still = collect(client, 1.0)
    ys = [o.state.ee_position_m[1] for o in still]
    assert max(ys) - min(ys) < 0.002 and all(o.estopped for o in still)
    assert_motion_refused(client, ErrorCode.ESTOPPED, "release_estop")
    st = client.status()
    assert st.estopped and st.estop_reason == "test"
    client.release_estop()
    y0 = client.latest_observation().state.ee_position_m[1]
    client.submit_chunk(ee_chunk(5, (0.0, 0.01, 0.0)))
    deadline = time.monotonic() + 10.0  # 0.5 s of motion; more on a loaded machine
    while client.latest_observation().state.ee_position_m[1] - y0 <= 0.03:
        assert time.monotonic() < deadline, "the arm did not move after the e-stop was released"
    client.stop_heartbeat()


def test_reset_lays_out_a_task(client: RobotClient) -> None:
    client.reset(task="put_green_container_in_bowl", seed=3)
    st = client.status()
    assert st.task == "put_green_container_in_bowl"
    obs = client.latest_observation()
    assert obs.task_success is False
    with pytest.raises(RobotServerError, match=r"unknown|task") as ei:
        client.reset(task="juggle")
    assert ei.value.code is ErrorCode.BACKEND_ERROR
    client.reset()  # still works after a bad request


def test_after_a_reset_the_client_hands_over_the_new_scene_only() -> None:
    """A fast-paced server publishes every idle tick, so when a reset's reply comes the subscriber
    often still holds the last observation from before it (a loop's previous episode, held).
    RobotClient skips observations of ticks up to the reset's (Ack.tick): an episode's first chunk
    is inferred from its own scene."""
    srv = start_server("--pacing", "fast")
    try:
        with RobotClient(srv.cmd_endpoint, timeout_s=5.0) as c:
            c.connect()
            c.latest_observation(timeout_s=5.0)  # subscribed: idle ticks are held from here on
            for seed in range(5):
                time.sleep(0.25)  # idle ticks publish meanwhile (10 Hz)
                tick = c.reset(task="put_green_container_in_bowl", seed=seed)
                assert tick >= 0
                assert c.latest_observation(timeout_s=5.0).tick > tick
    finally:
        assert srv.stop() == 0, "".join(srv.lines)


def test_starts_and_stops_cleanly_many_times() -> None:
    cmd_port, obs_port = free_port(), free_port()  # the same ports every time: sockets are released
    for i in range(4):
        srv = start_server("--pacing", "fast", cmd_port=cmd_port, obs_port=obs_port)
        try:
            with RobotClient(srv.cmd_endpoint, timeout_s=5.0) as c:
                assert c.connect().backend == "sim"
                assert c.latest_observation(timeout_s=5.0).cameras
        finally:
            rc = srv.stop()
        assert rc == 0, f"run {i}: exit code {rc}\n" + "".join(srv.lines)
        assert any("robot-server stopped" in line for line in srv.lines)


def test_watch_prints_the_stream(server: ServerProc, tmp_path: Path) -> None:
    out = subprocess.run(
        pde_command(
            "robot-server",
            "watch",
            "--cmd",
            server.cmd_endpoint,
            "--seconds",
            "2.5",
            "--save-dir",
            str(tmp_path),
        ),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "connected to pde-robot-server (sim" in out.stdout
    assert "obs#" in out.stdout and "external:224x224" in out.stdout
    assert (tmp_path / "wrist.jpg").read_bytes()[:2] == b"\xff\xd8"


def test_bad_settings_are_refused_with_a_message() -> None:
    port = str(free_port())
    out = subprocess.run(
        pde_command("robot-server", "--backend", "sim", "--cmd-port", port, "--obs-port", port),
        env=subprocess_env(MUJOCO_GL="egl"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "give them different ports" in out.stderr


def test_watch_without_a_server_says_so() -> None:
    out = subprocess.run(
        pde_command("robot-server", "watch", "--cmd", f"tcp://127.0.0.1:{free_port()}", "--seconds", "1"),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "is `pde robot-server` running" in out.stderr


def test_guiding_mode_hands_the_arm_over_and_back(client: RobotClient) -> None:
    client.start_heartbeat()
    client.submit_chunk(ee_chunk(40, (0.0, 0.002, 0.0)))
    client.set_guiding_mode(True)
    st = client.status()
    assert st.guiding and st.executing_chunk_seq == -1 and st.fault is RobotFault.NONE
    assert_motion_refused(client, ErrorCode.BUSY, "SetGuidingMode(enabled=False)")
    client.estop("while guiding")  # stopping always works
    client.release_estop()
    client.set_guiding_mode(False)
    assert not client.status().guiding
    accepted = client.submit_chunk(ee_chunk(42, (0.0, 0.002, 0.0)))
    assert accepted.steps > 0
    # The stop's reply says the tick it took effect at: the chunk ran its rows for the ticks before.
    assert client.stop() >= accepted.start_tick >= 0
    client.stop_heartbeat()


def test_guide_hands_the_arm_over_and_takes_it_back(server: ServerProc, client: RobotClient) -> None:
    out = subprocess.run(
        pde_command("robot-server", "guide", "--cmd", server.cmd_endpoint, "--seconds", "0.5"),
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "guiding mode on" in out.stdout and "guiding mode off" in out.stdout
    assert not client.status().guiding
