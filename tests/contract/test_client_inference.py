"""pde_contract.inference: InferRequest -> InferReply over TCP frames, errors raised on the client."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from pde_contract.codec import packb, unpackb
from pde_contract.inference import (
    FRAME_MAGIC,
    MAX_INFER_MESSAGE_BYTES,
    InferReply,
    InferRequest,
    PolicyClient,
    PolicyServer,
    PolicyServerError,
    parse_endpoint,
)
from pde_contract.messages import CameraFrame, Observation, RobotState
from tests.helpers import free_port


def observation(seq: int = 0) -> Observation:
    return Observation(
        seq=seq,
        publish_time_s=time.time(),
        state=RobotState(
            joint_positions_rad=np.arange(7.0),
            joint_velocities_rad_s=np.zeros(7),
            ee_position_m=np.array([0.4, 0.0, 0.3]),
            ee_quat_xyzw=np.array([1.0, 0, 0, 0]),
            gripper_width_m=0.05,
            robot_time_s=1.0,
        ),
        cameras=[
            CameraFrame(
                name="wrist", jpeg=b"\xff\xd8jpeg", width=4, height=4, capture_time_s=0.0, frame_index=1
            )
        ],
    )


def policy(obs: Observation, prompt: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    if prompt == "fail":
        raise RuntimeError("no weights loaded")
    if prompt == "unsendable":
        return np.array(["a", "b"], dtype=object), {}
    actions = np.full((10, 8), obs.state.gripper_width_m, np.float32)
    actions[0, :7] = obs.state.joint_positions_rad
    return actions, {"log_prob": np.array([len(prompt)], np.float32)}


@pytest.fixture
def endpoint() -> Iterator[str]:
    ep = f"tcp://127.0.0.1:{free_port()}"
    server = PolicyServer(policy, ep)
    server.start()
    yield ep
    server.close()


def test_round_trip_carries_actions_and_extras(endpoint: str) -> None:
    with PolicyClient(endpoint, timeout_s=2.0) as client:
        for seq in range(3):
            reply = client.infer(observation(seq), "put the bowl on the top rack")
            assert reply.ok and reply.actions is not None
            assert reply.actions.dtype == np.float32 and reply.actions.shape == (10, 8)
            np.testing.assert_array_equal(reply.actions[0, :7], np.arange(7.0, dtype=np.float32))
            np.testing.assert_array_equal(reply.extras["log_prob"], [28.0])
            assert reply.infer_time_s >= 0.0


def test_policy_errors_are_raised_on_the_client(endpoint: str) -> None:
    with PolicyClient(endpoint, timeout_s=2.0) as client:
        with pytest.raises(PolicyServerError, match="no weights loaded"):
            client.infer(observation(), "fail")
        assert client.infer(observation(), "ok").ok  # the server keeps serving


def test_unsendable_policy_output_gets_an_error_reply(endpoint: str) -> None:
    with PolicyClient(endpoint, timeout_s=2.0) as client:
        with pytest.raises(PolicyServerError, match=r"reply cannot be sent.*dtype object"):
            client.infer(observation(), "unsendable")
        assert client.infer(observation(), "ok").ok  # same connection, still in step


def raw_connection(endpoint: str) -> socket.socket:
    s = socket.create_connection(parse_endpoint(endpoint), timeout=3.0)
    return s


def frame(body: bytes, magic: bytes = FRAME_MAGIC, length: int | None = None) -> bytes:
    return struct.pack("<4sI", magic, len(body) if length is None else length) + body


def read_reply(s: socket.socket) -> InferReply:
    header = b""
    while len(header) < 8:
        chunk = s.recv(8 - len(header))
        assert chunk, "the server closed the connection without a reply"
        header += chunk
    magic, n = struct.unpack("<4sI", header)
    assert magic == FRAME_MAGIC
    body = b""
    while len(body) < n:
        body += s.recv(n - len(body))
    return unpackb(body, InferReply)


def closed_by_peer(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_wire_frames_round_trip_by_hand(endpoint: str) -> None:
    """The documented framing: b"PDEI" + uint32 length + msgpack InferRequest, and the same back."""
    with raw_connection(endpoint) as s:
        s.sendall(frame(packb(InferRequest(observation=observation(), prompt="abc", request_id=41))))
        reply = read_reply(s)
    assert reply.ok and reply.request_id == 41 and reply.actions is not None
    np.testing.assert_array_equal(reply.extras["log_prob"], [3.0])


def test_malformed_body_gets_an_error_reply_and_the_connection_stays(endpoint: str) -> None:
    with raw_connection(endpoint) as s:
        s.sendall(frame(b"\x93not an InferRequest"))
        reply = read_reply(s)
        assert not reply.ok and "InferRequest" in reply.error
        s.sendall(frame(packb(InferRequest(observation=observation(), prompt="x", request_id=2))))
        assert read_reply(s).ok


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", "PolicyClient"),  # not this protocol at all
        (frame(b"", length=MAX_INFER_MESSAGE_BYTES + 1), "exceeds the limit"),
    ],
)
def test_bad_frame_header_gets_an_error_and_the_connection_is_closed(
    endpoint: str, data: bytes, expected: str
) -> None:
    with raw_connection(endpoint) as s:
        s.sendall(data)
        reply = read_reply(s)
        assert not reply.ok and expected in reply.error
        assert closed_by_peer(s)
    with PolicyClient(endpoint, timeout_s=2.0) as client:  # the server keeps serving others
        assert client.infer(observation(), "ok").ok


def test_truncated_frame_loses_only_that_connection(endpoint: str) -> None:
    with raw_connection(endpoint) as s:
        s.sendall(frame(b"\x00" * 10, length=1000))  # promises 1000 bytes, sends 10, hangs up
    with PolicyClient(endpoint, timeout_s=2.0) as client:
        assert client.infer(observation(), "ok").ok


def test_concurrent_clients_each_get_their_own_replies(endpoint: str) -> None:
    errors: list[str] = []

    def run(k: int) -> None:
        with PolicyClient(endpoint, timeout_s=5.0) as client:
            for i in range(30):
                reply = client.infer(observation(), "p" * (k + 1))
                if reply.extras["log_prob"][0] != k + 1:
                    errors.append(f"client {k} request {i} got the reply to {reply.extras['log_prob']}")

    threads = [threading.Thread(target=run, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors


def test_client_reconnects_after_a_timeout() -> None:
    ep = f"tcp://127.0.0.1:{free_port()}"
    slow = threading.Event()

    def maybe_slow(obs: Observation, prompt: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if prompt == "slow":
            slow.wait(2.0)
        return policy(obs, prompt)

    server = PolicyServer(maybe_slow, ep)
    server.start()
    try:
        with PolicyClient(ep, timeout_s=2.0) as client:
            with pytest.raises(PolicyServerError, match=r"within 0\.2 s"):
                client.infer(observation(), "slow", timeout_s=0.2)
            slow.set()
            # a fresh connection: the late reply to "slow" can never be taken for this one
            reply = client.infer(observation(), "fast")
            assert reply.ok and reply.extras["log_prob"][0] == 4
    finally:
        server.close()


def test_endpoint_must_be_tcp_host_port() -> None:
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        PolicyClient("ipc:///tmp/policy")
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        PolicyClient("tcp://127.0.0.1")


def test_no_server_times_out() -> None:
    with (
        PolicyClient(f"tcp://127.0.0.1:{free_port()}", timeout_s=0.2) as client,
        pytest.raises(PolicyServerError, match="is it running"),
    ):
        client.infer(observation(), "x")


def test_wildcard_endpoint_binds_every_interface() -> None:
    port = free_port()
    server = PolicyServer(policy, f"tcp://*:{port}")
    server.start()
    try:
        with PolicyClient(f"tcp://127.0.0.1:{port}", timeout_s=2.0) as client:
            assert client.infer(observation(), "ok").ok
    finally:
        server.close()
