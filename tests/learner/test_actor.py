import time
from typing import Literal

import msgspec
import numpy as np
import pytest

from learner.actor import Actor, ActorSettings
from learner.policies.vla import make_test_policy
from learner.rewards import reward_from_label
from learner.synthetic import synthetic_observation
from learner.trainer import Trainer
from pde_contract.client import RobotServerError
from pde_contract.episodes import EpisodeFile
from pde_contract.messages import (
    ActionChunk,
    ActionSpace,
    ChunkAccepted,
    Counters,
    ErrorCode,
    Observation,
    ServerInfo,
    Status,
)
from teleop.scripted import ScriptedSource
from teleop.settings import TeleopSettings


def fake_info(pacing: Literal["realtime", "fast"] = "realtime", control_rate_hz: float = 10.0) -> ServerInfo:
    """The server's reply to Hello, as a connected client holds it."""
    return ServerInfo(
        protocol_version=4, server_name="fake", backend="sim", control_rate_hz=control_rate_hz,
        action_spaces=[ActionSpace.EE_DELTA], cameras=[], obs_endpoint="", heartbeat_timeout_s=0.2,
        pacing=pacing,
    )  # fmt: skip


class FakeRobotClient:
    """Stands in for pde_contract.client.RobotClient: executes chunks instantly and reports task
    success after ``succeed_after`` chunks (None: never)."""

    def __init__(self, succeed_after: int | None = None, drop_camera_at_obs: int = -1) -> None:
        self.drop_camera_at_obs = drop_camera_at_obs
        self.rng = np.random.default_rng(0)
        self.obs_seq = 0
        self.chunks: list[ActionChunk] = []
        self.succeed_after = succeed_after
        self.calls: list[str] = []
        self.heartbeat = False
        # connected to a realtime server at 10 Hz: the actor follows its chunk_timing setting
        self.info: ServerInfo | None = fake_info()

    def submit_chunk(self, chunk: ActionChunk) -> ChunkAccepted:
        assert self.heartbeat, "chunks must be sent while the heartbeat runs"
        if self.chunks:
            assert chunk.seq > self.chunks[-1].seq
        self.chunks.append(chunk)
        return ChunkAccepted(seq=chunk.seq, steps=len(chunk.actions))

    def reset(self, task: str = "", seed: int | None = None) -> None:
        self.calls.append(f"reset:{task}:{seed}")

    def stop(self) -> int | None:
        self.calls.append("stop")
        return None  # a client that does not say the tick: every row of the chunk counts as run

    def status(self) -> Status:
        return Status(
            backend="fake",
            connected=True,
            estopped=False,
            estop_reason="",
            episode_id="",
            executing_chunk_seq=self.chunks[-1].seq if self.chunks else -1,
            steps_remaining=0,
            holding=True,
            counters=Counters(),
        )

    def start_heartbeat(self, period_s: float = 0.05) -> None:
        self.heartbeat = True

    def stop_heartbeat(self) -> None:
        self.heartbeat = False

    def latest_observation(self, timeout_s: float = 1.0) -> Observation:
        self.obs_seq += 1
        obs = synthetic_observation(self.rng, 20, seq=self.obs_seq)
        obs.tick = 10 * self.obs_seq
        obs.last_chunk_seq = self.chunks[-1].seq if self.chunks else -1  # every chunk has run
        if self.obs_seq == self.drop_camera_at_obs:
            obs.cameras = obs.cameras[1:]  # a frame missing from one observation
        if self.succeed_after is not None:
            obs.task_success = len(self.chunks) >= self.succeed_after
        return obs


def test_the_actor_writes_for_the_rate_the_server_said_in_its_hello_reply() -> None:
    client = FakeRobotClient()
    client.info = fake_info(control_rate_hz=20.0)
    _, actor, ep = _run(client, max_chunks=2)
    assert actor.control_rate_hz == ep.control_rate_hz == 20.0
    assert [c.control_rate_hz for c in client.chunks] == [20.0, 20.0]


def test_an_actor_whose_client_has_not_connected_says_so() -> None:
    client = FakeRobotClient()
    client.info = None  # no Hello: no control rate
    with pytest.raises(RuntimeError, match=r"call client.connect\(\) before an episode"):
        _run(client)
    assert client.chunks == []


def _run(
    client,
    max_chunks=4,
    should_stop=lambda: False,
    chunk_timing="overlapped",
    person=None,
    requested=None,
    teleop=None,
):
    policy = make_test_policy("flow")
    actor = Actor(policy, client, ActorSettings(poll_period_s=0.0, chunk_timing=chunk_timing), teleop)
    ep = actor.run_episode(
        episode_id="ep1",
        task="put_green_container_in_bowl",
        canonical_prompt="put the green container in the bowl",
        rollout_prompt="drop the green box into the bowl",
        max_chunks=max_chunks,
        should_stop=should_stop,
        seed=7,
        person=person,
        takeover_requested=requested,
    )
    return policy, actor, ep


def test_episode_records_every_chunk_for_ppo():
    client = FakeRobotClient()
    policy, _, ep = _run(client)
    assert client.calls == ["reset:put_green_container_in_bowl:7"] and not client.heartbeat
    assert len(ep.chunks) == 4 == len(client.chunks)
    assert ep.rollout_prompt == "drop the green box into the bowl"
    assert ep.canonical_prompt == "put the green container in the bowl"
    for rec, sent in zip(ep.chunks, client.chunks, strict=True):
        assert np.array_equal(rec.actions, sent.actions) and sent.actions.shape == (4, 7)
        assert rec.trace is not None
        # per-chunk timing, copied into the database's chunks rows by the store
        assert rec.inference_s is not None and rec.inference_s >= 0
        assert rec.sent_time_s == sent.sent_time_s > 0
        elements = rec.trace.log_prob_elements
        assert elements is not None and elements.shape == (4, 7)  # per element: per-row/dim ratios
        assert float(elements.sum()) == pytest.approx(rec.trace.log_prob, rel=1e-4, abs=1e-3)
    # observations are distinct and in order
    assert [c.observation.seq for c in ep.chunks] == sorted({c.observation.seq for c in ep.chunks})
    # recorded episode trains directly
    stats = Trainer(policy).update([(ep, reward_from_label(True))])
    assert stats["n_chunks"] == 4


@pytest.mark.parametrize("timing", ["overlapped", "sync"])
def test_episode_ends_on_simulated_success(timing):
    _, _, ep = _run(FakeRobotClient(succeed_after=2), max_chunks=10, chunk_timing=timing)
    assert len(ep.chunks) == 2 and ep.success is True


def test_should_stop_holds_the_robot_and_returns_partial_episode():
    client = FakeRobotClient()
    n = iter(range(100))
    _, _, ep = _run(client, max_chunks=10, should_stop=lambda: next(n) >= 2)
    assert len(ep.chunks) == 2 and "stop" in client.calls and not client.heartbeat


def test_set_policy_swaps_between_episodes():
    client = FakeRobotClient()
    _, actor, _ = _run(client, max_chunks=1)
    new = make_test_policy("gaussian")
    actor.set_policy(new)
    ep = actor.run_episode(episode_id="e2", task="t", canonical_prompt="a", rollout_prompt="a", max_chunks=1)
    trace = ep.chunks[0].trace
    assert trace is not None and trace.chain.shape[0] == 2  # the Gaussian head's chain


def test_bad_max_chunks():
    with pytest.raises(ValueError, match="max_chunks"):
        _run(FakeRobotClient(), max_chunks=0)


def test_reward_from_label():
    assert (
        reward_from_label(True) == 1.0 and reward_from_label(False) == 0.0 and reward_from_label(None) == 0.0
    )


def test_observation_missing_a_camera_is_skipped():
    client = FakeRobotClient(drop_camera_at_obs=1)
    _, _, ep = _run(client, max_chunks=2)
    assert len(ep.chunks) == 2
    assert all(len(c.observation.cameras) == 2 for c in ep.chunks)
    assert ep.chunks[0].observation.seq == 2


class SlowStatusClient(FakeRobotClient):
    """Its first status replies come too late (a loaded machine), then it answers normally."""

    def __init__(self, late_replies: int, code: ErrorCode = ErrorCode.TIMEOUT) -> None:
        super().__init__()
        self.late_replies, self.code = late_replies, code

    def status(self) -> Status:
        if self.late_replies > 0:
            self.late_replies -= 1
            raise RobotServerError(self.code, "no reply to GetStatus within 1.0 s")
        return super().status()


def test_a_late_status_reply_does_not_end_the_episode():
    client = SlowStatusClient(late_replies=3)
    _, _, ep = _run(client, max_chunks=4)
    assert len(ep.chunks) == 4 and client.late_replies == 0


def test_other_status_errors_still_end_the_episode():
    with pytest.raises(RobotServerError, match="GetStatus"):
        _run(SlowStatusClient(late_replies=1, code=ErrorCode.BACKEND_ERROR))


class DeadServerClient(FakeRobotClient):
    """The robot server dies once the first chunk is submitted: every status poll times out (after
    ``timeout_s``, as the real client's do)."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self.timeout_s = timeout_s

    def status(self) -> Status:
        if self.chunks:
            time.sleep(self.timeout_s)
            raise RobotServerError(ErrorCode.TIMEOUT, f"no reply to GetStatus within {self.timeout_s} s")
        return super().status()


def test_a_dead_robot_server_ends_the_episode_in_server_silent_s_not_chunk_timeout_s():
    actor = Actor(
        make_test_policy("flow"),
        DeadServerClient(timeout_s=0.2),
        ActorSettings(poll_period_s=0.0, server_silent_s=0.5, chunk_timeout_s=30.0),
    )
    t0 = time.monotonic()
    with pytest.raises(RobotServerError, match="has not answered for"):
        actor.run_episode(episode_id="ep1", task="t", canonical_prompt="c", rollout_prompt="r", max_chunks=3)
    assert time.monotonic() - t0 < 10.0  # 0.6 s of polls; chunk_timeout_s would be 30 s


class EndlessChunkClient(FakeRobotClient):
    """A chunk that never finishes executing (a long chunk, or a server stuck holding it)."""

    def status(self) -> Status:
        st = super().status()
        st.steps_remaining = 5
        return st


def _stopped_after(client: EndlessChunkClient, stop_after_s: float) -> EpisodeFile:
    """An episode whose ``should_stop`` says stop ``stop_after_s`` into it (its first chunk runs)."""
    stop_at = time.monotonic() + stop_after_s
    actor = Actor(make_test_policy("flow"), client, ActorSettings(poll_period_s=0.001, chunk_timeout_s=30.0))
    return actor.run_episode(
        episode_id="ep1",
        task="t",
        canonical_prompt="c",
        rollout_prompt="r",
        max_chunks=3,
        should_stop=lambda: time.monotonic() > stop_at,
    )


def test_should_stop_is_asked_while_a_chunk_runs():
    """SIGTERM (the loop's stop) and the page's abort take effect mid-chunk, not after it."""
    client = EndlessChunkClient()
    t0 = time.monotonic()
    ep = _stopped_after(client, 0.3)
    assert time.monotonic() - t0 < 10.0 and len(ep.chunks) == 1 and client.calls[-1] == "stop"


class StoppedMidChunkClient(EndlessChunkClient):
    """Its chunk starts at tick 100; a stop takes effect at tick 103 (after 3 of its rows ran)."""

    def submit_chunk(self, chunk: ActionChunk) -> ChunkAccepted:
        accepted = super().submit_chunk(chunk)
        return msgspec.structs.replace(accepted, start_tick=100)

    def stop(self) -> int:
        super().stop()
        return 103


def test_a_chunk_stopped_mid_way_records_only_the_rows_that_ran():
    """PPO and the episode file see the rows the arm ran, not the rows sent (the server's Stop says
    the tick it took effect at)."""
    ep = _stopped_after(StoppedMidChunkClient(), 0.3)
    assert [c.rows_run for c in ep.chunks] == [(0, 3)]


@pytest.mark.parametrize(
    ("pacing", "timing", "overlaps"),
    [("realtime", "overlapped", True), ("fast", "overlapped", False), ("realtime", "sync", False)],
)
def test_chunks_overlap_only_on_a_realtime_server_and_not_in_sync(pacing, timing, overlaps):
    """Overlapped: every chunk after the first says the tick its row 0 was meant for (the server
    skips its rows in the past). A fast-paced sim server, or 'sync', gets chunks that start at row 0."""
    client = FakeRobotClient()
    client.info = fake_info(pacing)
    actor = Actor(make_test_policy("flow"), client, ActorSettings(poll_period_s=0.0, chunk_timing=timing))
    ep = actor.run_episode(episode_id="e", task="t", canonical_prompt="a", rollout_prompt="a", max_chunks=3)
    ticks = [c.first_row_tick for c in client.chunks]
    assert ticks[0] == -1  # inferred while the arm held still
    if overlaps:
        assert ticks[1:] == [c.observation.tick for c in ep.chunks[1:]]
    else:
        assert ticks[1:] == [-1, -1]
    assert [c.rows_run for c in ep.chunks] == [(0, 4)] * 3  # the fake runs every row


def _run_with_person(client, person, requested, chunk_timing="sync"):
    # The fake runs each chunk whole at once and says nothing of replaced ones: the person's rows
    # go without copies here (their copies, and which ran, against the sim server:
    # test_actor_takeover_sim.py).
    no_copies = TeleopSettings(record_hold_ticks=0)
    with person:
        return _run(
            client, 3, chunk_timing=chunk_timing, person=person, requested=requested, teleop=no_copies
        )[2]


@pytest.mark.parametrize("timing", ["overlapped", "sync"])
@pytest.mark.parametrize("ask_at", [1, 2, 3])
def test_a_requested_takeover_records_what_ran_and_hands_back(timing, ask_at):
    """Whenever the request comes (while a chunk runs, or while the policy infers), the episode
    records exactly the chunks sent, in order: the person's rows marked as theirs, a chunk the
    policy inferred meanwhile neither sent nor recorded, and the policy's chunks all sent after."""
    client = FakeRobotClient()
    asked = iter(range(100))
    row = np.array([0.0, 0.0, 0.01, 0.0, 0.0, 0.0, 0.08])
    ep = _run_with_person(
        client, ScriptedSource([row, row]), lambda: next(asked) == ask_at, chunk_timing=timing
    )
    assert len(ep.chunks) == len(client.chunks) == 3 + 2
    for rec, sent in zip(ep.chunks, client.chunks, strict=True):
        assert np.array_equal(rec.actions, sent.actions)
        assert (rec.commanded_by == "person") == (sent.actions.shape == (1, 7))
    assert [c.commanded_by for c in ep.chunks].count("person") == 2
    (iv,) = ep.interventions
    assert iv.trigger == "request" and iv.n_rows == 2
    assert all(
        c.commanded_by == "person" and c.trace is None for c in ep.chunks[iv.first_chunk : iv.first_chunk + 2]
    )


def test_a_person_who_sends_no_row_leaves_the_policy_driving():
    client = FakeRobotClient()
    asked = iter(range(100))
    ep = _run_with_person(client, ScriptedSource([]), lambda: next(asked) == 1)
    assert len(ep.chunks) == len(client.chunks) == 3 and not ep.interventions


def test_takeover_needs_an_ee_delta_policy():
    policy = make_test_policy("flow", action_space="joint_abs")
    actor = Actor(policy, FakeRobotClient(), ActorSettings(poll_period_s=0.0))
    with pytest.raises(ValueError, match="ee_delta"), ScriptedSource([]) as person:
        actor.run_episode(
            episode_id="ep1", task="t", canonical_prompt="p", rollout_prompt="p", max_chunks=1, person=person
        )


class StreamingFakeClient(FakeRobotClient):
    """A fast-paced server's stream: each chunk is seen executing for two observations, then ended
    (``last_chunk_seq`` it, nothing remaining); Status calls are counted."""

    def __init__(self, estop_at_obs: int = -1) -> None:
        super().__init__()
        self.estop_at_obs = estop_at_obs
        self.status_calls = 0
        self.seen_running = 0  # observations of the current chunk still executing
        self.info = fake_info("fast")

    def submit_chunk(self, chunk: ActionChunk) -> ChunkAccepted:
        self.seen_running = 0
        return super().submit_chunk(chunk)

    def status(self) -> Status:
        self.status_calls += 1
        return msgspec.structs.replace(super().status(), estopped=True, estop_reason="button")

    def latest_observation(self, timeout_s: float = 1.0) -> Observation:
        obs = super().latest_observation(timeout_s)
        obs.estopped = self.obs_seq == self.estop_at_obs
        if self.chunks and self.seen_running < 2:
            self.seen_running += 1
            obs.executing_chunk_seq, obs.steps_remaining = self.chunks[-1].seq, 4 - 2 * self.seen_running
        return obs


def test_a_fast_paced_server_s_stream_ends_each_chunk_without_status_polls():
    client = StreamingFakeClient()
    actor = Actor(make_test_policy("flow"), client, ActorSettings(poll_period_s=0.0))
    ep = actor.run_episode(episode_id="e", task="t", canonical_prompt="a", rollout_prompt="a", max_chunks=3)
    assert len(ep.chunks) == 3 and client.status_calls == 0
    # each chunk after the first is inferred from the observation after its predecessor ended
    assert [c.observation.seq for c in ep.chunks] == [1, 4, 7]
    assert all(c.observation.executing_chunk_seq == -1 for c in ep.chunks)


def test_an_e_stop_on_the_stream_ends_the_episode_with_its_reason():
    client = StreamingFakeClient(estop_at_obs=3)
    actor = Actor(make_test_policy("flow"), client, ActorSettings(poll_period_s=0.0))
    with pytest.raises(RuntimeError, match="e-stop latched during the episode: button"):
        actor.run_episode(episode_id="e", task="t", canonical_prompt="a", rollout_prompt="a", max_chunks=3)
