"""Which camera frames an observation carries: every frame read for it, however slowly the set was
read (a camera that stopped delivering is left out once its newest frame is over a second old)."""

from __future__ import annotations

import time
from typing import Literal

import pytest
import zmq

from pde_contract.codec import unpackb
from pde_contract.messages import OBS_TOPIC, CameraFrame, Observation
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings
from tests.helpers import free_port
from tests.robot_server.fakes import FakeCamera, FakeRobot

SLOW_READ_S = 1.5  # longer than the server's 1 s camera age limit


class SlowFirstReadCamera(FakeCamera):
    """Stamps its frame when the read starts (as SimCamera does before rendering); the first read
    takes SLOW_READ_S, like a sim camera's first render on a loaded machine."""

    first_read_done_s = float("inf")

    def read(self, timeout_s: float = 0.5) -> CameraFrame:
        t0 = time.time()
        if self._index == 0:
            time.sleep(SLOW_READ_S)
        frame = super().read(timeout_s)
        frame.capture_time_s = t0
        if frame.frame_index == 1:
            self.first_read_done_s = time.time()
        return frame


def subscribe(settings: RobotServerSettings) -> zmq.Socket:
    """Every observation, not only the newest (connected before the server starts publishing)."""
    ctx: zmq.Context = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, OBS_TOPIC)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(settings.obs_endpoint)
    return sub


def next_observation(sub: zmq.Socket, deadline: float) -> Observation:
    assert time.monotonic() < deadline and sub.poll(5000), "the server stopped publishing"
    return unpackb(memoryview(sub.recv())[len(OBS_TOPIC) :], Observation)  # one frame: topic + msgpack


@pytest.mark.parametrize(
    "mode",
    [
        {"pacing": "realtime", "capture_threads": "shared"},
        {"pacing": "realtime", "capture_threads": "per_camera"},
        {"pacing": "fast"},
    ],
    ids=["realtime-shared", "realtime-per-camera", "fast"],
)
def test_a_slowly_read_frame_is_not_left_out(mode: dict[str, str]) -> None:
    settings = RobotServerSettings.model_validate(
        {"cmd_port": free_port(), "obs_port": free_port(), "control_rate_hz": 4.0, "camera_fps": 4.0, **mode}
    )
    slow = SlowFirstReadCamera("external")
    server = RobotServer(FakeRobot(), [slow, FakeCamera("wrist")], settings)
    sub = subscribe(settings)
    after: list[Observation] = []  # published once the slow frame was read
    try:
        server.start()
        deadline = time.monotonic() + 15.0
        while len(after) < 3:
            obs = next_observation(sub, deadline)
            if obs.publish_time_s >= slow.first_read_done_s:
                after.append(obs)
    finally:
        sub.close()
        server.close()
    for obs in after:
        assert [f.name for f in obs.cameras] == ["external", "wrist"], (
            f"observation {obs.seq}, published after both cameras delivered, carries only "
            f"{[f.name for f in obs.cameras]}"
        )


@pytest.mark.parametrize("threads", ["shared", "per_camera"])
def test_a_camera_that_stopped_delivering_is_left_out(threads: Literal["shared", "per_camera"]) -> None:
    settings = RobotServerSettings(
        cmd_port=free_port(), obs_port=free_port(), camera_fps=10.0, capture_threads=threads
    )
    wrist = FakeCamera("wrist")
    server = RobotServer(FakeRobot(), [FakeCamera("external"), wrist], settings)
    sub = subscribe(settings)
    try:
        server.start()
        deadline = time.monotonic() + 15.0
        while len(next_observation(sub, deadline).cameras) < 2:
            pass
        wrist.fail = True  # unplugged: every read raises CameraError from now on
        unplugged_s = time.time()
        while (obs := next_observation(sub, deadline)).publish_time_s < unplugged_s + 1.2:
            pass
    finally:
        sub.close()
        server.close()
    assert [f.name for f in obs.cameras] == ["external"], "a frame over a second old was published"


def test_fast_pacing_renders_only_between_chunks() -> None:
    """Fast pacing publishes every tick, but reads the cameras only on ticks with no chunk
    executing: that observation is the one the actor acts on; mid-chunk ticks carry the state."""
    import numpy as np

    from pde_contract.client import RobotClient
    from pde_contract.messages import ActionChunk, ActionSpace

    settings = RobotServerSettings.model_validate(
        {"cmd_port": free_port(), "obs_port": free_port(), "pacing": "fast", "control_rate_hz": 10.0}
    )
    external = FakeCamera("external")
    server = RobotServer(FakeRobot(), [external, FakeCamera("wrist")], settings)
    sub = subscribe(settings)
    seen: list[Observation] = []
    reads_before = reads_after = 0
    try:
        server.start()
        with RobotClient(settings.cmd_endpoint, timeout_s=5.0) as client:
            client.connect()
            deadline = time.monotonic() + 15.0
            while not next_observation(sub, deadline).cameras:
                pass
            actions = np.zeros((10, 7))
            actions[:, 0], actions[:, 6] = 0.002, 0.08
            chunk = ActionChunk(
                seq=1,
                episode_id="e1",
                action_space=ActionSpace.EE_DELTA,
                actions=actions,
                control_rate_hz=10.0,
            )
            reads_before = external._index
            client.submit_chunk(chunk)
            while True:
                obs = next_observation(sub, deadline)
                seen.append(obs)
                if obs.last_chunk_seq == 1 and obs.executing_chunk_seq == -1:
                    reads_after = external._index
                    break
    finally:
        sub.close()
        server.close()
    # 10 ticks ran; the camera was read at most on the idle ticks around the chunk (the PUB socket
    # may drop some of the mid-chunk observations: its high-water mark is small on purpose)
    assert reads_after - reads_before <= 3, f"{reads_after - reads_before} camera reads for a 10-row chunk"
    inside = [o for o in seen if o.executing_chunk_seq == 1]
    assert inside and all(not o.cameras for o in inside), "mid-chunk observations should not render"
    assert [f.name for f in seen[-1].cameras] == ["external", "wrist"]
