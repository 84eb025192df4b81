"""Actor: runs one episode on the robot server with the policy in-process.

Per chunk: latest observation -> policy.sample(obs, rollout prompt) -> submit the chunk -> record
(observation, actions, the policy's trace: log_prob, value, chain; the inference time, the send
time, and the rows of the chunk that ran). When the next observation is taken is
``ActorSettings.chunk_timing``:

- ``overlapped``: while the chunk runs, as many ticks before its end as the slowest inference so far
  took (plus a margin). The next chunk is inferred while the arm moves, says which server tick its
  row 0 was meant for (``first_row_tick``), and takes over at the next tick with the row meant for
  that tick: the rows meant for ticks that ran meanwhile are skipped, by the server (pde_contract.seam).
- ``sync``: after the chunk has finished; the arm holds still while the policy infers.

The finished episode is an EpisodeFile (rollout and canonical prompt in its header); the terminal
reward comes later from the label (``learner.rewards.reward_from_label``).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic_settings import BaseSettings, SettingsConfigDict

from learner.policies.base import ChunkSample, ObsBatch, Policy
from pde_contract.client import RobotServerError
from pde_contract.episodes import ChunkRecord, EpisodeFile, PolicyTrace
from pde_contract.messages import ActionChunk, ChunkAccepted, ErrorCode, Observation, ServerInfo, Status
from pde_contract.seam import inference_lead_ticks, rows_run

log = logging.getLogger(__name__)


class RobotClientLike(Protocol):
    """The part of pde_contract.client.RobotClient the actor uses."""

    info: ServerInfo | None  # from connect(): the server's pacing decides whether chunks overlap

    def submit_chunk(self, chunk: ActionChunk) -> ChunkAccepted: ...
    def reset(self, task: str = "", seed: int | None = None) -> None: ...
    def stop(self) -> None: ...
    def status(self) -> Status: ...
    def start_heartbeat(self, period_s: float = 0.05) -> None: ...
    def stop_heartbeat(self) -> None: ...
    def latest_observation(self, timeout_s: float = 1.0) -> Observation: ...


def _server_silent(seq: int, silent_s: float) -> RobotServerError:
    # Shown on the page: what the operator does, not the client's link-key hints.
    return RobotServerError(
        ErrorCode.TIMEOUT,
        f"the robot server has not answered for {silent_s:.1f} s during chunk {seq}: "
        "is `pde robot-server` running?",
    )


class ActorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PDE_ACTOR_")

    control_rate_hz: float = 10.0
    """Must match the robot server's control rate (ServerInfo.control_rate_hz)."""
    heartbeat_period_s: float = 0.05
    """Heartbeat period while an episode runs (server timeout is 200 ms)."""
    obs_timeout_s: float = 2.0
    """Longest wait for a fresh observation."""
    chunk_timeout_s: float = 30.0
    """Longest wait for a submitted chunk to finish executing."""
    server_silent_s: float = 2.0
    """No reply to any status poll for this long while a chunk runs: the robot server is taken for
    dead and the episode ends, instead of waiting out chunk_timeout_s (replies late by less are
    waited out; one later than this means a server stalled past its own 200 ms watchdog)."""
    stop_check_period_s: float = 0.1
    """While a chunk runs, ``should_stop`` (SIGTERM, the page's abort) is asked this often."""
    poll_period_s: float = 0.005
    """Status polling period while a chunk executes (a fast-paced server's chunk end is read from
    its observation stream instead: it publishes every tick)."""
    reset_before_episode: bool = True
    """Send Reset(task, seed) before the first chunk (sim re-lays the scene; hardware homes)."""
    stop_on_success: bool = True
    """End the episode early when the simulator reports task success (hardware never reports it)."""
    deterministic: bool = False
    """Sample the mean chunk (evaluation) instead of a stochastic chain."""
    chunk_timing: Literal["overlapped", "sync"] = "overlapped"
    """'overlapped': infer the next chunk while the current one runs and let it take over at the
    seam, rows already in the past skipped (the arm never holds for the policy). 'sync': infer
    after each chunk has finished (the arm holds still for the inference time at every chunk
    end). A server with fast pacing (sim) always runs 'sync': there a chunk's rows outpace any
    inference, and observations inside a chunk carry no camera frames."""
    overlap_margin_ticks: int = 1
    """'overlapped': the next observation is taken this many control ticks earlier than the slowest
    of the last ``overlap_window_chunks`` inferences needed, so a slower one still lands before the
    seam. Each chunk then runs its rows less about (inference ticks + this margin)."""
    overlap_window_chunks: int = 3
    """'overlapped': how many recent inference times the lead is taken from (one slow outlier,
    a load spike, then stops cutting chunks short after this many chunks)."""


@dataclass
class _Running:
    """The chunk the server runs now, and where its record will say which rows ran."""

    record: ChunkRecord
    accepted: ChunkAccepted
    n_rows: int


def policy_trace(sample: ChunkSample, i: int) -> PolicyTrace:
    """What PPO needs of sample ``i`` of a batch, as the episode file records it."""
    return PolicyTrace(
        log_prob=float(sample.log_prob[i]),
        log_prob_elements=sample.log_prob_elements[i].copy(),
        value=float(sample.value[i]),
        chain=sample.chain[i].copy(),
    )


class Actor:
    def __init__(
        self, policy: Policy, client: RobotClientLike, settings: ActorSettings | None = None
    ) -> None:
        self.client = client
        self.settings = settings or ActorSettings()
        self._policy = policy
        self._lock = threading.Lock()
        # Chunk seqs must increase across episodes and restarts of this client: start from the clock.
        self._seq = int(time.time() * 1000)

    def set_policy(self, policy: Policy) -> None:
        """Swap weights; takes effect at the next episode (never mid-episode)."""
        with self._lock:
            self._policy = policy

    @property
    def policy(self) -> Policy:
        with self._lock:
            return self._policy

    def _fresh_observation(self, newer_than_seq: int, after_chunk_seq: int | None = None) -> Observation:
        """The newest observation published after ``newer_than_seq`` and, when given, after chunk
        ``after_chunk_seq`` stopped executing (so the next chunk sees where the last one ended)."""
        deadline = time.monotonic() + self.settings.obs_timeout_s
        while True:
            obs = self.client.latest_observation(timeout_s=self.settings.obs_timeout_s)
            if obs.seq > newer_than_seq and (
                after_chunk_seq is None or obs.executing_chunk_seq != after_chunk_seq
            ):
                return obs
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no observation newer than seq {newer_than_seq} within {self.settings.obs_timeout_s} s; "
                    "is the robot server publishing?"
                )
            time.sleep(self.settings.poll_period_s)

    def _usable_observation(self, policy: Policy, obs: Observation) -> tuple[Observation, ObsBatch]:
        """The observation preprocessed; one the policy cannot use (a camera frame missing from it)
        is replaced by the next published one, until ``obs_timeout_s``."""
        deadline = time.monotonic() + self.settings.obs_timeout_s
        while True:
            try:
                return obs, policy.preprocess([obs])
            except ValueError as e:
                if time.monotonic() > deadline:
                    raise
                log.warning("skipping observation %d: %s", obs.seq, e)
                obs = self._fresh_observation(obs.seq)

    def _wait_chunk_done(self, seq: int, should_stop: Callable[[], bool], rows_left: int = 0) -> bool:
        """Wait until chunk ``seq`` has run (or has at most ``rows_left`` rows still to run); False
        when ``should_stop()`` said stop first."""
        cfg = self.settings
        deadline = time.monotonic() + cfg.chunk_timeout_s
        last_reply_s = time.monotonic()
        next_stop_check_s = last_reply_s + cfg.stop_check_period_s  # asked just before the chunk
        while True:
            if time.monotonic() >= next_stop_check_s:
                next_stop_check_s = time.monotonic() + cfg.stop_check_period_s
                if should_stop():
                    return False
            try:
                status = self.client.status()
            except RobotServerError as e:
                # A status reply late on a loaded machine is no reason to drop the episode: the
                # heartbeat runs on its own thread and the server's watchdog guards the arm. A
                # server silent for server_silent_s is gone, though: no need to wait the chunk out.
                silent_s = time.monotonic() - last_reply_s
                if e.code is not ErrorCode.TIMEOUT or time.monotonic() > deadline:
                    raise
                if silent_s >= cfg.server_silent_s:
                    log.error("chunk %d: no status reply for %.1f s: %s", seq, silent_s, e)
                    raise _server_silent(seq, silent_s) from e
                log.warning("chunk %d: status poll timed out, polling again: %s", seq, e)
                continue
            last_reply_s = time.monotonic()
            if status.estopped:
                raise RuntimeError(f"e-stop latched during the episode: {status.estop_reason}")
            if status.executing_chunk_seq != seq or status.steps_remaining <= rows_left:
                return True
            if time.monotonic() > deadline:
                raise TimeoutError(f"chunk {seq} still executing after {self.settings.chunk_timeout_s} s")
            time.sleep(self.settings.poll_period_s)

    def _chunk_end_observation(
        self, seq: int, newer_than_seq: int, should_stop: Callable[[], bool]
    ) -> Observation | None:
        """The first observation after chunk ``seq`` has run (what the next chunk is inferred
        from); None when ``should_stop()`` said stop first."""
        info = self.client.info
        if info is not None and info.pacing == "fast":
            return self._chunk_end_on_stream(seq, should_stop)
        if not self._wait_chunk_done(seq, should_stop):
            return None
        return self._fresh_observation(newer_than_seq, after_chunk_seq=seq)

    def _chunk_end_on_stream(self, seq: int, should_stop: Callable[[], bool]) -> Observation | None:
        """A fast-paced server publishes an observation on every tick, so the stream itself says
        when chunk ``seq`` has run (the contract: ``last_chunk_seq`` is it, no rows remaining, not
        executing); waiting on it takes no Status round trips, which were ~16 a chunk and a large
        share of both processes' CPU in a sim episode (bench/bench_episode_throughput.py). The
        observation is the one the Status wait then read: the newest, published by the tick that
        ran the chunk's last row."""
        cfg = self.settings
        deadline = time.monotonic() + cfg.chunk_timeout_s
        next_stop_check_s = time.monotonic() + cfg.stop_check_period_s
        while True:
            try:
                obs = self.client.latest_observation(timeout_s=cfg.obs_timeout_s)
            except RobotServerError as e:
                if e.code is not ErrorCode.TIMEOUT:
                    raise
                log.error("chunk %d: no observation for %.1f s: %s", seq, cfg.obs_timeout_s, e)
                raise _server_silent(seq, cfg.obs_timeout_s) from e
            if obs.estopped:
                raise RuntimeError(f"e-stop latched during the episode: {self.client.status().estop_reason}")
            if obs.last_chunk_seq == seq and obs.executing_chunk_seq != seq and obs.steps_remaining == 0:
                return obs
            now = time.monotonic()
            if now >= next_stop_check_s:
                next_stop_check_s = now + cfg.stop_check_period_s
                if should_stop():
                    return None
            if now > deadline:
                raise TimeoutError(f"chunk {seq} still executing after {cfg.chunk_timeout_s} s")

    def _overlapping(self) -> bool:
        info = self.client.info
        if self.settings.chunk_timing == "sync":
            return False
        if info is not None and info.pacing == "fast":
            log.info("the robot server paces fast: chunks run 'sync' (rows outpace inference there)")
            return False
        return True

    def _submit(self, chunk: ActionChunk) -> ChunkAccepted:
        """Submit; a chunk whose rows are all in the past (an inference slower than the running
        chunk's rows) is sent again from row 0: the arm has been holding since that chunk ended."""
        try:
            return self.client.submit_chunk(chunk)
        except RobotServerError as e:
            if e.code is not ErrorCode.STALE or chunk.first_row_tick < 0:
                raise
            log.warning("chunk %d: %s; starting it from row 0", chunk.seq, e)
            self._seq += 1
            chunk.seq, chunk.first_row_tick = self._seq, -1
            return self.client.submit_chunk(chunk)

    def run_episode(
        self,
        *,
        episode_id: str,
        task: str,
        canonical_prompt: str,
        rollout_prompt: str,
        max_chunks: int,
        should_stop: Callable[[], bool] = lambda: False,
        seed: int | None = None,
    ) -> EpisodeFile:
        """Roll out one episode under ``rollout_prompt``. Stops after ``max_chunks``, on simulated
        success, or as soon as ``should_stop()`` is true (the robot is told to hold)."""
        if max_chunks < 1:
            raise ValueError(f"max_chunks must be >= 1, got {max_chunks}")
        policy = self.policy
        cfg = self.settings
        if cfg.reset_before_episode:
            self.client.reset(task=task, seed=seed)
        overlapping = self._overlapping()
        chunks: list[ChunkRecord] = []
        success: bool | None = None
        running: _Running | None = None
        recent_inference_s: collections.deque[float] = collections.deque(
            maxlen=max(1, cfg.overlap_window_chunks)
        )
        self.client.start_heartbeat(cfg.heartbeat_period_s)
        try:
            obs = self._fresh_observation(-1)
            for _ in range(max_chunks):
                if should_stop():
                    self.client.stop()
                    running = None
                    break
                if running is not None:
                    seq = running.accepted.seq
                    if overlapping:
                        lead = inference_lead_ticks(
                            max(recent_inference_s), cfg.control_rate_hz, cfg.overlap_margin_ticks
                        )
                        if not self._wait_chunk_done(seq, should_stop, rows_left=lead):
                            self.client.stop()
                            running = None
                            break
                        obs = self._fresh_observation(obs.seq)
                    else:
                        ended = self._chunk_end_observation(seq, obs.seq, should_stop)
                        if ended is None:
                            self.client.stop()
                            running = None
                            break
                        obs = ended
                    success = obs.task_success
                    if success and cfg.stop_on_success:
                        if not overlapping:
                            running = None  # it has run: nothing left to wait for
                        break  # an overlapped one finishes below, as a sync one has
                obs, batch = self._usable_observation(policy, obs)
                t0 = time.perf_counter()
                sample = policy.sample(batch, [rollout_prompt], deterministic=cfg.deterministic)
                inference_s = time.perf_counter() - t0
                recent_inference_s.append(inference_s)
                self._seq += 1
                chunk = ActionChunk(
                    seq=self._seq,
                    episode_id=episode_id,
                    action_space=policy.action_space,
                    actions=sample.actions[0],
                    control_rate_hz=cfg.control_rate_hz,
                    sent_time_s=time.time(),
                    # The first chunk is inferred while the arm holds still: nothing to skip.
                    first_row_tick=obs.tick if overlapping and running is not None else -1,
                )
                accepted = self._submit(chunk)
                if running is not None:
                    running.record.rows_run = rows_run(
                        running.accepted.rows_skipped,
                        running.n_rows,
                        running.accepted.start_tick,
                        accepted.start_tick,
                    )
                record = ChunkRecord(
                    observation=obs,
                    actions=sample.actions[0],
                    trace=policy_trace(sample, 0),
                    inference_s=inference_s,
                    sent_time_s=chunk.sent_time_s,
                    rows_run=rows_run(accepted.rows_skipped, len(chunk.actions), accepted.start_tick, None),
                )
                chunks.append(record)
                running = _Running(record, accepted, len(chunk.actions))
            if running is not None:
                # The last chunk runs to its end (its record already says so).
                ended = self._chunk_end_observation(running.accepted.seq, obs.seq, should_stop)
                if ended is None:
                    self.client.stop()
                else:
                    obs = ended
                    success = obs.task_success
        finally:
            self.client.stop_heartbeat()
        return EpisodeFile(
            episode_id=episode_id,
            task=task,
            canonical_prompt=canonical_prompt,
            rollout_prompt=rollout_prompt,
            action_space=policy.action_space,
            control_rate_hz=cfg.control_rate_hz,
            chunks=chunks,
            success=success,
            seed=seed,
            source=f"policy:{getattr(policy, 'version', 'unknown')}",
        )
