"""The observation stream's wire framing and latest-only delivery, against a bare PUB socket:
one frame per observation (OBS_TOPIC + msgpack), the subscriber always hands out the newest."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import numpy as np
import pytest
import zmq

from pde_contract.client import RobotClient, RobotServerError
from pde_contract.codec import packb_into
from pde_contract.messages import OBS_TOPIC, CameraFrame, ErrorCode, Observation, RobotState
from tests.helpers import free_port


def observation(seq: int) -> Observation:
    return Observation(
        seq=seq,
        publish_time_s=time.time(),
        state=RobotState(
            joint_positions_rad=np.arange(7.0) + seq,
            joint_velocities_rad_s=np.zeros(7),
            ee_position_m=np.array([0.4, 0.0, 0.3]),
            ee_quat_xyzw=np.array([0.0, 0, 0, 1]),
            gripper_width_m=0.05,
            robot_time_s=float(seq),
        ),
        cameras=[
            CameraFrame(
                name=name,
                jpeg=bytes([seq % 256]) * 5000,
                width=4,
                height=4,
                capture_time_s=0.0,
                frame_index=seq,
            )
            for name in ("external", "wrist")
        ],
    )


@pytest.fixture
def pub_client() -> Iterator[tuple[zmq.Socket, RobotClient]]:
    ctx: zmq.Context = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 2)  # as the robot server: drop rather than queue
    port = free_port()
    pub.bind(f"tcp://127.0.0.1:{port}")
    client = RobotClient(f"tcp://127.0.0.1:{free_port()}", obs_endpoint=f"tcp://127.0.0.1:{port}")
    try:
        yield pub, client
    finally:
        client.close()
        pub.close(linger=0)


def publish(pub: zmq.Socket, obs: Observation, settle_s: float = 0.05) -> None:
    time.sleep(settle_s)  # with SNDHWM 2, messages sent back to back may be dropped: let it drain
    with contextlib.suppress(zmq.Again):  # the server's PUB drops when a subscriber is full
        pub.send(packb_into(bytearray(OBS_TOPIC), len(OBS_TOPIC), obs), flags=zmq.NOBLOCK)


def subscribed(pub: zmq.Socket, client: RobotClient) -> Observation:
    """Publish until the subscription is through (ZMQ's slow joiner) and return what arrived."""
    for _ in range(50):
        publish(pub, observation(0))
        try:
            first = client.latest_observation(timeout_s=0.1)
        except RobotServerError:
            continue
        while True:  # an earlier attempt's observation may still be on its way: take it now
            try:
                client.latest_observation(timeout_s=0.3)
            except RobotServerError:
                return first
    raise AssertionError("the subscriber never received an observation")


def test_one_frame_round_trip(pub_client: tuple[zmq.Socket, RobotClient]) -> None:
    pub, client = pub_client
    subscribed(pub, client)
    sent = observation(7)
    publish(pub, sent)
    got = client.latest_observation(timeout_s=2.0)
    assert got.seq == 7 and [c.name for c in got.cameras] == ["external", "wrist"]
    assert got.cameras[1].jpeg == sent.cameras[1].jpeg
    np.testing.assert_array_equal(got.state.joint_positions_rad, sent.state.joint_positions_rad)
    got.state.joint_positions_rad[0] = -1.0  # decoded arrays are the caller's to write


def test_the_caller_gets_the_newest_never_a_queued_one(pub_client: tuple[zmq.Socket, RobotClient]) -> None:
    pub, client = pub_client
    subscribed(pub, client)
    # Far more than the socket queues and kernel buffers hold while nobody reads: a subscriber that
    # let them fill would make the PUB side drop the final, newest observation.
    for seq in range(1, 3001):
        publish(pub, observation(seq), settle_s=0.0)
    time.sleep(0.3)
    publish(pub, observation(99_999))
    time.sleep(0.2)
    assert client.latest_observation(timeout_s=2.0).seq == 99_999
    with pytest.raises(RobotServerError) as e:  # nothing newer since: wait, then time out
        client.latest_observation(timeout_s=0.1)
    assert e.value.code is ErrorCode.TIMEOUT
    publish(pub, observation(100_000))
    assert client.latest_observation(timeout_s=2.0).seq == 100_000


def test_malformed_observation_gets_a_clear_error(pub_client: tuple[zmq.Socket, RobotClient]) -> None:
    pub, client = pub_client
    subscribed(pub, client)
    time.sleep(0.05)
    pub.send(OBS_TOPIC + b"\xc1 not msgpack")
    with pytest.raises(RobotServerError, match="unreadable observation") as e:
        client.latest_observation(timeout_s=2.0)
    assert e.value.code is ErrorCode.MALFORMED
    publish(pub, observation(3))  # the stream goes on
    assert client.latest_observation(timeout_s=2.0).seq == 3
