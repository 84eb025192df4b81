"""RobotClient against a real RobotServer (sockets on loopback) with a FakeRobot and FakeCameras."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import msgspec
import numpy as np
import pytest
import zmq

from pde_contract.client import ProtocolVersionError, RobotClient, RobotServerError
from pde_contract.codec import packb, unpackb
from pde_contract.messages import (
    MAX_COMMAND_BYTES,
    MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    ActionChunk,
    ActionSpace,
    ChunkAccepted,
    Envelope,
    ErrorCode,
    EStop,
    GetStatus,
    Health,
    Hello,
    ReleaseEStop,
    Reply,
    Reset,
    RobotFault,
    Status,
    Stop,
    SubmitChunk,
)
from robot_server.robots.base import FaultReport
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings
from tests.helpers import free_port
from tests.robot_server.fakes import FakeCamera, FakeRobot


@pytest.fixture
def server() -> Iterator[RobotServer]:
    # Watchdogs for a loaded machine, not the defaults: with a 0.2 s heartbeat timeout a pause that
    # starves the client's heartbeat thread (not the control thread) drops a chunk a test waits
    # for, and a command thread not scheduled for 2 s (seen at a load average of 20 on 2 cores)
    # reports a stall that keeps the server unhealthy for 10 s. The watchdog tests set their own.
    settings = RobotServerSettings(
        cmd_port=free_port(),
        obs_port=free_port(),
        control_rate_hz=20.0,
        heartbeat_timeout_s=1.0,
        command_stall_timeout_s=10.0,
    )
    srv = RobotServer(FakeRobot(home_time_s=0.3), [FakeCamera("external"), FakeCamera("wrist")], settings)
    srv.start()
    yield srv
    srv.close()


@pytest.fixture
def client(server: RobotServer) -> Iterator[RobotClient]:
    with RobotClient(server.settings.cmd_endpoint, name="test", timeout_s=2.0) as c:
        c.connect()
        yield c


def chunk(seq: int, rows: int = 4, rate_hz: float = 20.0) -> ActionChunk:
    a = np.zeros((rows, 7), np.float32)
    a[:, 0] = 0.005
    a[:, 6] = 0.08
    return ActionChunk(
        seq=seq, episode_id="ep", action_space=ActionSpace.EE_DELTA, actions=a, control_rate_hz=rate_hz
    )


def wait_healthy(client: RobotClient, timeout_s: float = 2.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (h := client.health()).ok:
        assert time.monotonic() < deadline, f"server not healthy: {h.detail}"
        time.sleep(0.02)


def raw_request(server: RobotServer, frames: list[bytes]) -> Reply:
    ctx: zmq.Context = zmq.Context.instance()
    with ctx.socket(zmq.DEALER) as s:
        s.setsockopt(zmq.LINGER, 0)
        s.connect(server.settings.cmd_endpoint)
        s.send_multipart(frames)
        assert s.poll(3000), "the server must answer every message"
        return unpackb(s.recv(), Reply)


def test_handshake_reports_the_server(client: RobotClient) -> None:
    info = client.connect()
    assert info.protocol_version == PROTOCOL_VERSION and info.control_rate_hz == 20.0
    assert info.cameras == ["external", "wrist"] and info.heartbeat_timeout_s == 1.0
    wait_healthy(client)


def test_version_mismatch_raises(client: RobotClient) -> None:
    with pytest.raises(ProtocolVersionError, match="protocol 99") as ei:
        client.request(Hello(protocol_version=99, client_name="old"))
    assert ei.value.code is ErrorCode.VERSION_MISMATCH


def test_no_server_times_out_with_a_hint() -> None:
    with RobotClient(f"tcp://127.0.0.1:{free_port()}", timeout_s=0.2) as c:
        t0 = time.monotonic()
        with pytest.raises(RobotServerError, match=r"within 0\.2 s: is `pde robot-server` running") as ei:
            c.connect()
        # The message proves the 0.2 s timeout was used; the clock only that it did not hang.
        assert ei.value.code is ErrorCode.TIMEOUT and time.monotonic() - t0 < 10.0


def test_chunk_round_trip_and_status(client: RobotClient) -> None:
    client.start_heartbeat()
    acc = client.submit_chunk(chunk(0))
    assert acc.seq == 0 and acc.steps == 4
    deadline = time.monotonic() + 3
    while client.status().counters.chunks_executed < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    st = client.status()
    assert st.counters.steps_executed == 4 and st.holding and st.state is not None
    np.testing.assert_allclose(st.state.ee_position_m[0], 0.45 + 0.02)
    with pytest.raises(RobotServerError) as ei:
        client.submit_chunk(chunk(0))
    assert ei.value.code is ErrorCode.STALE


def test_bad_chunks_get_typed_errors(client: RobotClient) -> None:
    bad = chunk(1)
    bad.actions[0, 0] = np.inf
    for c, code in ((bad, ErrorCode.INVALID_ACTION), (chunk(2, rate_hz=15.0), ErrorCode.INVALID_ACTION)):
        with pytest.raises(RobotServerError) as ei:
            client.submit_chunk(c)
        assert ei.value.code is code and ei.value.message
    assert client.status().counters.chunks_rejected == 2


def test_late_reply_of_a_timed_out_request_is_ignored(server: RobotServer, client: RobotClient) -> None:
    with pytest.raises(RobotServerError) as ei:
        client.request(Reset(task="t"), timeout_s=0.05)  # the fake takes 0.3 s to home
    assert ei.value.code is ErrorCode.TIMEOUT
    deadline = time.monotonic() + 10.0
    while not server.robot.homes:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the reset never finished"
        time.sleep(0.02)
    time.sleep(0.1)  # the reset's Ack is now waiting on the socket (sent within a 10 ms poll)
    assert isinstance(client.status(), Status)


def test_reset_blocks_until_home_and_estop_still_answers(server: RobotServer, client: RobotClient) -> None:
    other = RobotClient(server.settings.cmd_endpoint, name="ui", timeout_s=5.0)
    try:
        t0 = time.monotonic()
        client.reset(task="pick", seed=3)
        assert time.monotonic() - t0 >= 0.3
        assert server.robot.homes == [("pick", 3)]  # type: ignore[attr-defined]
        # the command socket serves others while a reset runs
        gate = server.robot.home_gate = threading.Event()  # type: ignore[attr-defined]
        th = threading.Thread(target=client.reset, kwargs={"task": "again"})
        th.start()
        try:
            deadline = time.monotonic() + 10.0
            while not server.executor.snapshot().resetting:
                assert time.monotonic() < deadline, "the second reset never started"
                time.sleep(0.01)
            other.estop("during reset")  # answered although the reset has not finished
            assert th.is_alive() and len(server.robot.homes) == 1  # type: ignore[attr-defined]
        finally:
            gate.set()
            th.join()
        with pytest.raises(RobotServerError) as ei:
            client.submit_chunk(chunk(5))
        assert ei.value.code is ErrorCode.ESTOPPED
        client.release_estop()
        client.submit_chunk(chunk(6))
    finally:
        other.close()


def test_malformed_oversized_and_unknown_messages_are_answered(
    server: RobotServer, client: RobotClient
) -> None:
    r = raw_request(server, [b"\xc1 definitely not msgpack"])
    assert r.code is ErrorCode.MALFORMED and "Envelope" in r.message
    r = raw_request(server, [b"x" * (MAX_COMMAND_BYTES + 1)])
    assert r.code is ErrorCode.TOO_LARGE and str(MAX_COMMAND_BYTES) in r.message
    r = raw_request(server, [msgspec.msgpack.encode({"request_id": 7, "request": {"type": "Dance"}})])
    assert r.code is ErrorCode.UNKNOWN_COMMAND and r.request_id == 7 and "Hello" in r.message
    env = msgspec.msgpack.decode(packb(Envelope(request_id=8, request=SubmitChunk(chunk=chunk(9)))))
    env["request"]["chunk"]["action_space"] = "cartesian_velocity"
    r = raw_request(server, [msgspec.msgpack.encode(env)])
    assert r.code is ErrorCode.INVALID_ACTION and "ee_delta" in r.message
    r = raw_request(server, [b"a", b"b"])
    assert r.code is ErrorCode.MALFORMED and "one message frame" in r.message
    r = raw_request(
        server, [msgspec.msgpack.encode({"request_id": 9, "request": {"type": "GripperCommand"}})]
    )
    assert r.code is ErrorCode.MALFORMED and "width_m" in r.message
    c = client.status().counters
    assert (c.commands_malformed, c.commands_too_large, c.commands_unknown, c.chunks_rejected) == (3, 1, 1, 1)
    wait_healthy(client)  # still serving


def test_latest_observation_is_the_newest(server: RobotServer, client: RobotClient) -> None:
    first = client.latest_observation()
    assert {f.name for f in first.cameras} == {"external", "wrist"}
    deadline = time.monotonic() + 10.0
    while server._obs_seq < first.seq + 15:  # observations queue up meanwhile
        assert time.monotonic() < deadline, "the server stopped publishing"
        time.sleep(0.05)
    published = server._obs_seq  # the next seq: the newest published is published - 1
    obs = client.latest_observation()
    # At most a couple still in flight on loopback; the oldest queued one is ~15 behind.
    assert obs.seq >= published - 3, f"a stale queued observation was returned ({obs.seq} of {published})"


def test_slow_subscriber_never_stalls_the_robot(server: RobotServer, client: RobotClient) -> None:
    ctx: zmq.Context = zmq.Context.instance()
    lazy = ctx.socket(zmq.SUB)  # subscribes and never reads
    lazy.setsockopt(zmq.SUBSCRIBE, b"")
    lazy.setsockopt(zmq.RCVHWM, 1)
    lazy.connect(client.obs_endpoint)
    try:
        before = client.status()
        time.sleep(1.0)
        after = client.status()
        # A busy CI machine may delay ticks; a stall would cost every one of the ~20 a second.
        assert after.counters.tick_overruns - before.counters.tick_overruns <= 15
        # The ticks that ran, not health's control_loop_hz: that rate counts from the last pause
        # over 3 periods, so one late tick just before the question made it 0.0 (seen under load).
        assert after.tick - before.tick >= 5, (before.tick, after.tick)
        # Observations keep coming: one published after this point arrives.
        t0 = time.time()
        deadline = time.monotonic() + 10.0
        while client.latest_observation(timeout_s=10.0).publish_time_s <= t0:
            assert time.monotonic() < deadline, "no observation published since the lazy subscriber joined"
    finally:
        lazy.close(linger=0)


def test_heartbeat_thread_feeds_the_watchdog() -> None:
    # A 1 s watchdog fed every 50 ms: a loaded machine may delay a heartbeat, not twenty in a row.
    settings = RobotServerSettings(
        cmd_port=free_port(), obs_port=free_port(), control_rate_hz=20.0, heartbeat_timeout_s=1.0
    )
    with (
        RobotServer(FakeRobot(), [FakeCamera("external")], settings),
        RobotClient(settings.cmd_endpoint, name="test", timeout_s=5.0) as client,
        RobotClient(settings.cmd_endpoint, name="observer", timeout_s=5.0) as observer,
    ):
        client.start_heartbeat(period_s=0.05)
        client.submit_chunk(chunk(10, rows=36))  # 1.8 s at 20 Hz: outlasts the watchdog
        deadline = time.monotonic() + 30.0
        while observer.status().counters.chunks_executed < 1:
            assert time.monotonic() < deadline, "the chunk never finished"
            time.sleep(0.05)
        assert observer.status().counters.watchdog_trips == 0
        client.stop_heartbeat()
        client.submit_chunk(chunk(11, rows=200))
        # Only the controlling client's messages feed the watchdog: the observer may poll.
        while (trips := observer.status().counters.watchdog_trips) == 0:
            assert time.monotonic() < deadline, "the watchdog never tripped without heartbeats"
            time.sleep(0.05)
        assert trips == 1


def test_closed_client_refuses_requests(server: RobotServer) -> None:
    c = RobotClient(server.settings.cmd_endpoint)
    c.close()
    with pytest.raises(RobotServerError, match="closed"):
        c.status()


class RawConnection:
    """One DEALER connection that sends hand-built frames (no RobotClient help)."""

    def __init__(self, server: RobotServer) -> None:
        self.sock: zmq.Socket = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(server.settings.cmd_endpoint)
        self._ids = iter(range(1, 10**9))

    def send(self, request: object) -> Reply:
        return self.send_raw(packb(Envelope(request_id=next(self._ids), request=request)))  # type: ignore[arg-type]

    def send_raw(self, data: bytes, timeout_ms: int = 3000) -> Reply:
        self.sock.send(data)
        assert self.sock.poll(timeout_ms), "the server must answer every message"
        return unpackb(self.sock.recv(), Reply)

    def close(self) -> None:
        self.sock.close(linger=0)


@pytest.fixture
def raw(server: RobotServer) -> Iterator[RawConnection]:
    conn = RawConnection(server)
    yield conn
    conn.close()


def _chunk_request(**chunk_fields: object) -> bytes:
    fields: dict[str, object] = {
        "type": "ActionChunk",
        "seq": 0,
        "episode_id": "x",
        "action_space": "ee_delta",
        "actions": np.zeros((2, 7)),
        "control_rate_hz": 20.0,
    }
    fields.update(chunk_fields)
    return packb({"request_id": 7, "request": {"type": "SubmitChunk", "chunk": fields}})


def test_wrongly_typed_and_deeply_nested_messages_get_malformed_and_serving_goes_on(
    raw: RawConnection, client: RobotClient
) -> None:
    r = raw.send_raw(_chunk_request(action_space=[1]))
    assert r.code is ErrorCode.MALFORMED and r.request_id == 7
    assert "action_space" in r.message and "'ee_delta'" in r.message
    r = raw.send(Reset(seed=-1))
    assert r.code is ErrorCode.MALFORMED and "seed" in r.message and ">= 0" in r.message
    for nested in (  # as the request, and in a field of a valid request that the server would skip
        b"\x82\xaarequest_id\x03\xa7request" + b"\x91" * 1000 + b"\xc0",
        b"\x82\xaarequest_id\x03\xa7request\x82\xa4type\xa6Health\xa1x" + b"\x91" * 1000 + b"\xc0",
    ):
        r = raw.send_raw(nested)
        assert r.code is ErrorCode.MALFORMED, r
    wait_healthy(client)
    assert client.submit_chunk(chunk(0)).steps == 4
    assert client.status().counters.commands_malformed == 4


def test_an_unexpected_error_in_one_request_gets_internal_and_serving_goes_on(
    server: RobotServer, client: RobotClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    decode = server._decode

    def broken(body: bytes) -> object:
        if b"GetStatus" in body:
            raise KeyError("bug")
        return decode(body)

    monkeypatch.setattr(server, "_decode", broken)
    with pytest.raises(RobotServerError, match="KeyError") as ei:
        client.status()
    assert ei.value.code is ErrorCode.INTERNAL
    monkeypatch.setattr(server, "_decode", decode)
    assert client.status().counters.commands_failed == 1
    wait_healthy(client)


def test_a_failed_command_loop_holds_the_arm_restarts_and_health_says_so(
    server: RobotServer, client: RobotClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    send = server._send
    calls = []

    def fails_once(ident: bytes, reply: Reply) -> None:
        calls.append(reply)
        if len(calls) == 1:
            raise RuntimeError("socket broke")
        send(ident, reply)

    client.start_heartbeat()
    client.submit_chunk(chunk(0, rows=200))  # 10 s
    client.stop_heartbeat()
    monkeypatch.setattr(server, "_send", fails_once)
    with pytest.raises(RobotServerError) as ei:
        client.request(GetStatus(), timeout_s=0.5)
    assert ei.value.code is ErrorCode.TIMEOUT  # that reply was lost with the loop
    h = client.health()
    assert not h.ok and "command loop failed" in h.detail and "socket broke" in h.detail
    st = client.status()
    assert st.counters.command_loop_restarts == 1 and st.executing_chunk_seq == -1  # held


def test_a_stuck_command_thread_holds_the_arm_and_health_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The heartbeat watchdog is off: only the command watchdog can stop the chunk.
    settings = RobotServerSettings(
        cmd_port=free_port(),
        obs_port=free_port(),
        control_rate_hz=20.0,
        heartbeat_timeout_s=0.0,
        # Longer than a 200-row SubmitChunk takes on a loaded machine: at 0.3 s the watchdog once tripped
        # on the submit itself (a fresh-clone CI run), not on the stuck GetStatus (the chunk runs 10 s).
        command_stall_timeout_s=2.0,
    )
    srv = RobotServer(FakeRobot(), [], settings)
    srv.start()
    release = threading.Event()
    status = srv.status

    def stuck_status() -> Status:
        release.wait(30.0)  # a request that never finishes, until the test lets it
        return status()

    try:
        with RobotClient(settings.cmd_endpoint, name="stall", timeout_s=2.0) as c:
            c.connect()
            c.submit_chunk(chunk(0, rows=200))  # 10 s
            monkeypatch.setattr(srv, "status", stuck_status)
            with pytest.raises(RobotServerError) as ei:
                c.request(GetStatus(), timeout_s=0.2)
            assert ei.value.code is ErrorCode.TIMEOUT
            deadline = time.monotonic() + 20.0
            while srv.executor.snapshot().executing_chunk_seq != -1:  # held while still stuck
                assert time.monotonic() < deadline, "the command watchdog did not hold the arm"
                time.sleep(0.01)
            assert srv.executor.counters.command_loop_stalls == 1
            release.set()
            monkeypatch.setattr(srv, "status", status)
            h = c.health()
            assert not h.ok and "stuck handling GetStatus" in h.detail, h.detail
            st = c.status()
            assert st.counters.command_loop_stalls == 1 and st.holding
    finally:
        release.set()
        srv.close()


def test_a_latched_backend_fault_is_in_status_until_reset(server: RobotServer, client: RobotClient) -> None:
    robot = server.robot
    assert isinstance(robot, FakeRobot)
    robot.fault_report = FaultReport(RobotFault.USER_STOP, "user stop pressed", "release it, then Reset")
    deadline = time.monotonic() + 10.0
    while (st := client.status()).fault is not RobotFault.USER_STOP:
        assert time.monotonic() < deadline, "the fault never reached Status"
        time.sleep(0.01)
    assert st.fault_detail == "user stop pressed" and st.fault_action == "release it, then Reset"
    with pytest.raises(RobotServerError, match="user_stop fault: user stop pressed release it") as ei:
        client.submit_chunk(chunk(0))
    assert ei.value.code is ErrorCode.BACKEND_ERROR
    client.reset()  # the acknowledgement (FakeRobot.home clears it, as the FR3 backend's does)
    st = client.status()
    assert st.fault is RobotFault.NONE and st.fault_action == ""
    assert client.submit_chunk(chunk(1)).steps == 4


def test_motion_needs_the_handshake_and_stopping_does_not(raw: RawConnection, server: RobotServer) -> None:
    for request in (Health(), GetStatus(), Stop(), EStop(reason="raw")):
        assert raw.send(request).ok, request
    assert server.executor.snapshot().estopped
    r = raw.send_raw(_chunk_request())
    assert (
        r.code is ErrorCode.HANDSHAKE_REQUIRED and f"Hello(protocol_version={PROTOCOL_VERSION}" in r.message
    )
    r = raw.send(Hello(protocol_version=PROTOCOL_VERSION + 1, client_name="old"))
    assert r.code is ErrorCode.VERSION_MISMATCH
    assert raw.send(Reset()).code is ErrorCode.HANDSHAKE_REQUIRED
    assert raw.send(Hello(protocol_version=PROTOCOL_VERSION, client_name="raw")).ok
    assert raw.send(ReleaseEStop()).ok
    r = raw.send_raw(_chunk_request())
    assert r.ok and isinstance(r.payload, ChunkAccepted)
    # A version mismatch forgets an earlier handshake.
    raw.send(Hello(protocol_version=PROTOCOL_VERSION + 1, client_name="old"))
    assert raw.send_raw(_chunk_request(seq=1)).code is ErrorCode.HANDSHAKE_REQUIRED


def test_robot_client_says_hello_by_itself(server: RobotServer) -> None:
    # e.g. after a server restart: the new server has never seen this connection's Hello
    with RobotClient(server.settings.cmd_endpoint, name="late", timeout_s=2.0) as c:
        assert c.submit_chunk(chunk(0)).steps == 4
        assert c.info is not None and c.info.protocol_version == PROTOCOL_VERSION


def test_every_message_up_to_the_frame_limit_gets_a_reply(raw: RawConnection, client: RobotClient) -> None:
    for size in (MAX_COMMAND_BYTES + 1, MAX_FRAME_BYTES):
        r = raw.send_raw(b"\x00" * size, timeout_ms=10_000)
        assert r.code is ErrorCode.TOO_LARGE and str(MAX_COMMAND_BYTES) in r.message
    # Beyond it libzmq drops the connection unread: no reply, and the server serves on.
    raw.sock.send(b"\x00" * (MAX_FRAME_BYTES + 1))
    assert not raw.sock.poll(1000)
    wait_healthy(client)
    # RobotClient refuses to send a command over the limit at all.
    big = chunk(0, rows=10)
    big.episode_id = "e" * MAX_COMMAND_BYTES
    with pytest.raises(RobotServerError, match="not sent") as ei:
        client.submit_chunk(big)
    assert ei.value.code is ErrorCode.TOO_LARGE
