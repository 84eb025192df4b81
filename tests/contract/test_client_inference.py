"""pde_contract.inference: InferRequest -> InferReply over ZMQ, errors raised on the client."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from pde_contract.codec import unpackb
from pde_contract.inference import InferReply, PolicyClient, PolicyServer, PolicyServerError
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


def test_malformed_request_gets_an_error_reply(endpoint: str) -> None:
    ctx: zmq.Context = zmq.Context.instance()
    with ctx.socket(zmq.DEALER) as s:
        s.connect(endpoint)
        s.send(b"\x93not an InferRequest")
        assert s.poll(2000)
        reply = unpackb(s.recv(), InferReply)
    assert not reply.ok and "InferRequest" in reply.error


def test_no_server_times_out() -> None:
    with (
        PolicyClient(f"tcp://127.0.0.1:{free_port()}", timeout_s=0.2) as client,
        pytest.raises(PolicyServerError, match="is it running"),
    ):
        client.infer(observation(), "x")
