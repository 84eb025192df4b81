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

A person may take over mid-episode (HIL-SERL style; ``run_episode(person=...)``): when the teleop
source's ``wants_control()`` says so (a SpaceMouse past its deadband), or ``takeover_requested()``
does (the page's button, passed in by the loop), the policy's chunk is preempted at the next tick by
the person's first row; the person's rows then run one per tick through the server's safety path
(each with hold copies that the next row replaces: ``teleop.held``, as the recorder sends them;
a SpaceMouse is followed between the per-tick reads, a change sent at once) until the source ends
the take, and the policy's next chunk starts from the state the person left.
Each tick a person's row ran at (a copy, when the next row came late, as the row repeated) is a
ChunkRecord with ``commanded_by="person"`` and no trace (PPO leaves it out); each takeover is an
``Intervention`` in the episode file. Offered while any policy chunk runs, the last one included.

The finished episode is an EpisodeFile (rollout and canonical prompt in its header); the terminal
reward comes later from the label (``learner.rewards.reward_from_label``).
"""

from __future__ import annotations

import collections
import enum
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import msgspec
import numpy as np
from pydantic import model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from learner.policies.base import ChunkSample, ObsBatch, Policy
from pde_contract.client import RobotServerError
from pde_contract.episodes import ChunkRecord, EpisodeFile, Intervention, PolicyTrace, write_episode
from pde_contract.messages import (
    ActionChunk,
    ActionSpace,
    ChunkAccepted,
    ErrorCode,
    Observation,
    ServerInfo,
    Status,
)
from pde_contract.seam import inference_lead_ticks, rows_run
from pde_contract.settings import DataLayout, data_dir_field
from teleop.held import Following, HeldRows, TickStream, hold_copies, read_when_due
from teleop.settings import TeleopSettings

if TYPE_CHECKING:
    from teleop.base import TeleopSource

log = logging.getLogger(__name__)


class RobotClientLike(Protocol):
    """The part of pde_contract.client.RobotClient the actor uses."""

    info: ServerInfo | None  # from connect(): the server's control rate, and its pacing (do chunks overlap)

    def submit_chunk(self, chunk: ActionChunk) -> ChunkAccepted: ...
    def reset(self, task: str = "", seed: int | None = None) -> int | None: ...
    def stop(self) -> int | None: ...  # the tick it stopped at (None: a client that does not say)
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
    model_config = SettingsConfigDict(env_prefix="PDE_ACTOR_", populate_by_name=True)

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
    fast_inference: bool = False
    """π0.5: sample through the real-time path (prefix cache kept in the model's dtype, SDPA
    attention, static shapes; learner/policies/pi05_realtime.py). The trainer is unaffected."""
    bf16_weights: bool = False
    """π0.5: the actor's copy of the weights in bfloat16 (half the memory; the trainer keeps its
    float32 master weights and each swap casts the new snapshot)."""
    takeover_max_s: float = 60.0
    """A person's takeover hands back to the policy by itself after this long (the operator
    normally ends it first: the source's end button or key)."""
    intervention_demos: bool = False
    """Beyond the paper (HIL-SERL's demo buffer): write each takeover's rows as a demonstration
    file under <data_dir>/demos/<task>/ (``pde learner sft`` reads there). Off: only the episode
    file holds them."""
    data_dir: Path = data_dir_field("PDE_ACTOR_")
    cuda_graphs: bool = False
    """π0.5 with fast_inference on a CUDA GPU: sampling captured as one CUDA graph per batch size
    (on first use, in the warm-up before an episode) and replayed; on a CPU a logged no-op."""
    compiled_kernels: bool = False
    """π0.5 with fast_inference: the real-time path's elementwise pieces (residual add + RMS norm,
    GeGLU, RoPE, the flow step) each compiled into one kernel by torch.compile (Inductor; on a CPU
    it needs a C++ compiler). Compiled on first use (the warm-up), so the first episode starts later."""

    @model_validator(mode="after")
    def _graphs_need_the_fast_path(self) -> ActorSettings:
        for name in ("cuda_graphs", "compiled_kernels"):
            if getattr(self, name) and not self.fast_inference:
                raise ValueError(
                    f"{name} applies to the real-time path: set PDE_ACTOR_FAST_INFERENCE=1 as well "
                    f"(or PDE_ACTOR_{name.upper()}=0)"
                )
        return self


class _Waited(enum.Enum):
    DONE = "done"  # the chunk ran (or is within rows_left of its end)
    STOPPED = "stopped"  # should_stop() said stop
    INTERRUPTED = "interrupted"  # interrupt() said so: a person takes over (or ends their take)


@dataclass
class _TakeoverWatch:
    """Asked while the policy drives: does a person take over now, and why."""

    person: TeleopSource | None
    requested: Callable[[], bool] | None
    trigger: Literal["device", "request"] = "device"

    def __call__(self) -> bool:
        if self.person is None:
            return False
        if self.requested is not None and self.requested():
            self.trigger = "request"
            return True
        if self.person.wants_control():
            self.trigger = "device"
            return True
        return False


@dataclass
class _Episode:
    """What an episode has recorded so far."""

    chunks: list[ChunkRecord] = field(default_factory=list)
    interventions: list[Intervention] = field(default_factory=list)


@dataclass
class _Running:
    """The chunk the server runs now, and where its record will say which rows ran."""

    record: ChunkRecord
    accepted: ChunkAccepted
    n_rows: int

    def preempted_at(self, next_start_tick: int | None) -> None:
        """The next chunk (the policy's or a person's), or a stop, took over at ``next_start_tick``
        (None or -1: unknown, so every row is taken to have run)."""
        self.record.rows_run = rows_run(
            self.accepted.rows_skipped, self.n_rows, self.accepted.start_tick, next_start_tick
        )


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
        self,
        policy: Policy,
        client: RobotClientLike,
        settings: ActorSettings | None = None,
        teleop_settings: TeleopSettings | None = None,
    ) -> None:
        self.client = client
        self.settings = settings or ActorSettings()
        self._policy = policy.for_acting(self.settings)
        # a takeover's rows are sent as the recorder's: record_hold_ticks, record_read_margin_s
        # (read from the environment at the first takeover, not by an actor nobody takes over from)
        self._teleop_settings = teleop_settings
        self._lock = threading.Lock()
        self._episode_lock = threading.Lock()  # held by run_episode: an in-place swap waits for it
        # Chunk seqs must increase across episodes and restarts of this client: start from the clock.
        self._seq = int(time.time() * 1000)

    def set_policy(self, policy: Policy) -> None:
        """Swap weights; takes effect at the next episode (never mid-episode). The acting copy takes
        ``policy``'s weights in place where it can (``Policy.take_weights_of``: π0.5's real-time copy
        keeps its fused weights and captured CUDA graphs; the swap waits for a running episode to
        end); otherwise ``policy`` becomes the actor's own (``Policy.for_acting``: a π0.5 one may be
        cast to bf16 in place)."""
        with self._episode_lock, self._lock:
            if self._policy.take_weights_of(policy):
                return
        acting = policy.for_acting(self.settings)
        with self._lock:
            self._policy = acting

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

    def _wait_chunk_done(
        self,
        seq: int,
        should_stop: Callable[[], bool],
        rows_left: int = 0,
        interrupt: Callable[[], bool] | None = None,
    ) -> _Waited:
        """Wait until chunk ``seq`` has run (or has at most ``rows_left`` rows still to run), unless
        ``should_stop()`` says stop first, or ``interrupt()`` (asked at every poll) says a person
        takes over the policy's chunk (or, during a take, ended it)."""
        cfg = self.settings
        deadline = time.monotonic() + cfg.chunk_timeout_s
        last_reply_s = time.monotonic()
        next_stop_check_s = last_reply_s + cfg.stop_check_period_s  # asked just before the chunk
        while True:
            if time.monotonic() >= next_stop_check_s:
                next_stop_check_s = time.monotonic() + cfg.stop_check_period_s
                if should_stop():
                    return _Waited.STOPPED
            if interrupt is not None and interrupt():
                return _Waited.INTERRUPTED
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
                return _Waited.DONE
            if time.monotonic() > deadline:
                raise TimeoutError(f"chunk {seq} still executing after {self.settings.chunk_timeout_s} s")
            time.sleep(self.settings.poll_period_s)

    def _chunk_end_observation(
        self, seq: int, newer_than_seq: int, should_stop: Callable[[], bool]
    ) -> Observation | None:
        """The first observation after chunk ``seq`` has run (what the next chunk is inferred
        from); None when ``should_stop()`` said stop first."""
        if self._fast_paced():
            return self._chunk_end_on_stream(seq, should_stop)
        if self._wait_chunk_done(seq, should_stop) is _Waited.STOPPED:
            return None
        return self._fresh_observation(newer_than_seq, after_chunk_seq=seq)

    @property
    def control_rate_hz(self) -> float:
        """The robot server's control rate, from its reply to the client's Hello (``connect()``):
        the rate every chunk is written for, so it is never a setting of the actor's own."""
        info = self.client.info
        if info is None:
            raise RuntimeError(
                "the robot client has not connected: call client.connect() before an episode (the "
                "server's reply to Hello gives the control rate the chunks are written for)"
            )
        return info.control_rate_hz

    def _fast_paced(self) -> bool:
        info = self.client.info
        return info is not None and info.pacing == "fast"

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

    def _stop(self, running: _Running | None) -> None:
        """Hold the arm; the chunk it stopped (if any) then records only the rows that ran."""
        tick = self.client.stop()
        if running is not None:
            running.preempted_at(tick)

    def _submit(self, chunk: ActionChunk) -> ChunkAccepted:
        """Submit; a chunk whose rows are all in the past (an inference slower than the running
        chunk's rows) is sent again from row 0: the arm has been holding since that chunk ended."""
        try:
            return self.client.submit_chunk(chunk)
        except RobotServerError as e:
            if e.code is ErrorCode.TIMEOUT:
                # the server died between chunks (a fast-paced one can finish a chunk before it
                # goes): the same words as a silence while a chunk runs, for the page
                log.error("chunk %d: %s", chunk.seq, e)
                raise RobotServerError(
                    ErrorCode.TIMEOUT,
                    f"the robot server has not answered chunk {chunk.seq}: is `pde robot-server` running?",
                ) from e
            if e.code is not ErrorCode.STALE or chunk.first_row_tick < 0:
                raise
            log.warning("chunk %d: %s; starting it from row 0", chunk.seq, e)
            self._seq += 1
            chunk.seq, chunk.first_row_tick = self._seq, -1
            return self.client.submit_chunk(chunk)

    def _newest_observation(self, previous: Observation) -> Observation:
        """The newest observation with camera frames published since the last read; ``previous``
        when none came."""
        try:
            obs = self.client.latest_observation(timeout_s=0.0)
        except RobotServerError as e:
            if e.code is ErrorCode.TIMEOUT:
                return previous
            raise
        return obs if obs.cameras else previous

    def _take_over(
        self,
        person: TeleopSource,
        watch: _TakeoverWatch,
        episode_id: str,
        running: _Running | None,
        obs: Observation,
        should_stop: Callable[[], bool],
        recorded: _Episode,
    ) -> tuple[_Running | None, Observation, bool]:
        """A person's take: their rows, one per tick with hold copies (``teleop.held``, as the
        recorder sends them), until the source ends it. The first row preempts ``running`` at the
        server's next tick (its record then says where it stopped). A ``rereadable`` source (the
        SpaceMouse) is followed between the per-tick reads as the recorder follows it
        (``teleop.held.Following``): a changed row (a release, a push) is sent at once and runs at
        the next tick. Each tick a person's row ran at is recorded, a copy as the row repeated.
        Returns (the policy's chunk if the person sent no row and nothing stopped it, the
        observation after the take, whether ``should_stop`` stopped the episode)."""
        if self._teleop_settings is None:
            self._teleop_settings = TeleopSettings()
        cfg, rate_hz, teleop = self.settings, self.control_rate_hz, self._teleop_settings
        period_s = 1.0 / rate_hz
        info = self.client.info
        hold = hold_copies(teleop.record_hold_ticks, None if info is None else info.pacing)
        rows = HeldRows(self.client, episode_id, rate_hz, hold)
        seen = TickStream(self._newest_observation(obs))
        person.start_take(float(seen.newest.state.gripper_width_m))
        sent: list[tuple[Observation, float]] = []  # per row: the newest observation, its send time

        def send(row: np.ndarray) -> None:
            nonlocal running
            self._seq += 1
            chunk, accepted = rows.send(row, self._seq)
            if running is not None:  # the policy's chunk ran until the person's first row
                running.preempted_at(accepted.start_tick)
                running = None
            sent.append((seen.newest, chunk.sent_time_s))

        follow = Following(rows, person, period_s, send) if hold and person.rereadable else None

        def poll() -> bool:
            """Between the per-tick reads: the observations, and the device followed; True once
            the person ended the take."""
            seen.see(self._newest_observation(seen.newest))
            return follow is not None and follow.poll()

        stopped = False
        for _ in range(max(1, math.ceil(cfg.takeover_max_s * rate_hz))):
            # Asked before each of the person's rows: a row's wait asks it only after
            # stop_check_period_s (a tick), which the take's waits do not last.
            if should_stop():
                stopped = True
                break
            cmd = person.read(period_s)
            if cmd.end:
                break
            send(cmd.ee_delta_row())
            # Until the row has run at its tick (its copies may still be to run: the next row
            # replaces them); a row the device's change sent in its place before that tick is
            # waited for in turn, but not one sent for a later tick (the next read replaces it):
            # a device whose every report differs (a hand's jitter) was chased for ever, the take
            # asking neither should_stop nor takeover_max_s.
            tick = rows.sent[-1][0]
            waited, seq = _Waited.DONE, -1
            while waited is _Waited.DONE and seq != self._seq and rows.sent[-1][0] == tick:
                if seq >= 0:
                    time.sleep(cfg.poll_period_s)  # replaced before its tick: not a busy loop
                seq = self._seq
                waited = self._wait_chunk_done(seq, should_stop, rows_left=hold, interrupt=poll)
            if waited is _Waited.STOPPED:
                stopped = True
                break
            if poll():
                break
            if hold and teleop.record_read_margin_s is not None:
                read_when_due(time.monotonic(), period_s, teleop.record_read_margin_s, poll)
            if follow is not None and follow.ended:
                break
        obs = seen.newest
        if not rows.sent:
            if stopped:  # before the person's first row: the policy's chunk is stopped here
                self._stop(running)
                running = None
            return running, obs, stopped
        end_seq = self._seq
        if hold:
            # The take ends: a still row (no motion, the gripper as the last row left it) replaces
            # the last row's copies not run yet, and its reply says how many ran; then the arm holds.
            self._seq += 1
            still = np.zeros(rows.sent[-1][1].shape, dtype=np.float32)
            still[6] = rows.sent[-1][1][6]
            end_seq = rows.send(still, self._seq)[0].seq
            self.client.stop()
            runs = rows.runs_before_still()
        else:
            if stopped:
                self.client.stop()
            runs = [1] * len(rows.sent)  # each one-row chunk was waited for until it ran
        first = len(recorded.chunks)
        for r in rows.ticks(runs):
            own, sent_time_s = sent[r.sent_index]
            # a copy starts from the state of its own tick where one was seen
            at_tick, _stale = seen.observation_at(r.tick)
            recorded.chunks.append(
                ChunkRecord(
                    observation=at_tick if r.copy and at_tick.tick > own.tick else own,
                    actions=r.row[None],
                    sent_time_s=sent_time_s,
                    rows_run=(0, 1),
                    commanded_by="person",
                )
            )
        n_rows = len(recorded.chunks) - first
        if n_rows:
            recorded.interventions.append(
                Intervention(
                    first_chunk=first,
                    n_rows=n_rows,
                    trigger=watch.trigger,
                    start_tick=rows.sent[0][0],
                )
            )
        log.info(
            "%s: a person took over (%s) for %d rows (%d repeated: a row came late)",
            episode_id,
            watch.trigger,
            n_rows,
            sum(max(0, n - 1) for n in runs),
        )
        if not stopped:
            obs = self._fresh_observation(obs.seq, after_chunk_seq=end_seq)
        return None, obs, stopped

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
        person: TeleopSource | None = None,
        takeover_requested: Callable[[], bool] | None = None,
        practice: bool = False,
    ) -> EpisodeFile:
        """Roll out one episode under ``rollout_prompt``. Stops after ``max_chunks`` policy chunks,
        on simulated success, or as soon as ``should_stop()`` is true (the robot is told to hold).
        With ``person`` (a connected teleop source), a person may take over: when
        ``person.wants_control()`` or ``takeover_requested()`` says so (module docstring). A
        ``practice`` episode (the page's practice mode) writes nothing: no intervention demos."""
        if max_chunks < 1:
            raise ValueError(f"max_chunks must be >= 1, got {max_chunks}")
        policy = self.policy
        cfg, rate_hz = self.settings, self.control_rate_hz
        if person is not None and policy.action_space is not ActionSpace.EE_DELTA:
            raise ValueError(
                f"a person takes over with ee_delta rows, but the policy acts in "
                f"{policy.action_space.value}: take over from an ee_delta policy, or run without person="
            )
        watch = _TakeoverWatch(person, takeover_requested)
        if cfg.reset_before_episode:
            self.client.reset(task=task, seed=seed)
        overlapping = self._overlapping()
        recorded = _Episode()
        chunks = recorded.chunks
        success: bool | None = None
        running: _Running | None = None
        recent_inference_s: collections.deque[float] = collections.deque(
            maxlen=max(1, cfg.overlap_window_chunks)
        )
        n_sent = 0
        self.client.start_heartbeat(cfg.heartbeat_period_s)
        self._episode_lock.acquire()  # an in-place swap (set_policy) waits for the chunks to be done
        try:
            obs = self._fresh_observation(-1)
            while n_sent < max_chunks:
                if should_stop():
                    self._stop(running)
                    running = None
                    break
                if running is not None:
                    seq = running.accepted.seq
                    if not overlapping and watch.person is None and self._fast_paced():
                        # the sim: the chunk's end read off the observation stream (no Status polls)
                        ended = self._chunk_end_on_stream(seq, should_stop)
                        if ended is None:
                            self._stop(running)
                            running = None
                            break
                        obs = ended
                    else:
                        lead = 0  # sync: the chunk runs to its end
                        if overlapping:
                            lead = inference_lead_ticks(
                                max(recent_inference_s), rate_hz, cfg.overlap_margin_ticks
                            )
                        waited = self._wait_chunk_done(seq, should_stop, rows_left=lead, interrupt=watch)
                        if waited is _Waited.STOPPED:
                            self._stop(running)
                            running = None
                            break
                        if waited is _Waited.INTERRUPTED:  # watch(): a person takes over
                            assert person is not None
                            running, obs, stopped = self._take_over(
                                person, watch, episode_id, running, obs, should_stop, recorded
                            )
                            if stopped:
                                break
                            if running is not None:
                                continue  # the person sent no row: the policy's chunk goes on
                        elif overlapping:
                            obs = self._fresh_observation(obs.seq)
                        else:
                            obs = self._fresh_observation(obs.seq, after_chunk_seq=seq)
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
                if watch():
                    # A person took over while the policy inferred: its chunk is never sent (nor
                    # recorded); the policy infers again from where the person hands back.
                    assert person is not None
                    running, obs, stopped = self._take_over(
                        person, watch, episode_id, running, obs, should_stop, recorded
                    )
                    if stopped:
                        break
                    if running is None and obs.task_success and cfg.stop_on_success:
                        success = True
                        break
                    continue
                self._seq += 1
                chunk = ActionChunk(
                    seq=self._seq,
                    episode_id=episode_id,
                    action_space=policy.action_space,
                    actions=sample.actions[0],
                    control_rate_hz=rate_hz,
                    sent_time_s=time.time(),
                    # The first chunk is inferred while the arm holds still: nothing to skip.
                    first_row_tick=obs.tick if overlapping and running is not None else -1,
                )
                accepted = self._submit(chunk)
                n_sent += 1
                if running is not None:
                    running.preempted_at(accepted.start_tick)
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
            if running is not None and person is not None:
                # A person may take over the last chunk too (the episode then ends with the take).
                waited = self._wait_chunk_done(running.accepted.seq, should_stop, interrupt=watch)
                if waited is _Waited.STOPPED:
                    self._stop(running)
                    running = None
                elif waited is _Waited.INTERRUPTED:  # watch(): a person takes over
                    running, obs, stopped = self._take_over(
                        person, watch, episode_id, running, obs, should_stop, recorded
                    )
                    if running is None and not stopped:
                        success = obs.task_success
            if running is not None:
                # The last chunk runs to its end (its record already says so).
                ended = self._chunk_end_observation(running.accepted.seq, obs.seq, should_stop)
                if ended is None:
                    self._stop(running)
                else:
                    obs = ended
                    success = obs.task_success
        finally:
            self._episode_lock.release()
            self.client.stop_heartbeat()
        episode = EpisodeFile(
            episode_id=episode_id,
            task=task,
            canonical_prompt=canonical_prompt,
            rollout_prompt=rollout_prompt,
            action_space=policy.action_space,
            control_rate_hz=rate_hz,
            chunks=chunks,
            success=success,
            seed=seed,
            source=f"policy:{getattr(policy, 'version', 'unknown')}",
            interventions=recorded.interventions,
        )
        if cfg.intervention_demos and not practice:
            write_intervention_demos(episode, DataLayout(cfg.data_dir).demos)
        return episode


def intervention_demos(episode: EpisodeFile) -> list[EpisodeFile]:
    """Each takeover's rows as a demonstration of the episode's task (beyond the paper: HIL-SERL
    adds a person's corrections to its demo buffer). ``success`` True marks a demonstration, as a
    kept take's does (what SFT selects); the RL episode's own label and reward are untouched."""
    return [
        msgspec.structs.replace(
            episode,
            episode_id=f"{episode.episode_id}-intervention-{k}",
            chunks=episode.chunks[iv.first_chunk : iv.first_chunk + iv.n_rows],
            success=True,
            source=f"intervention:{episode.source}",
            interventions=[],
        )
        for k, iv in enumerate(episode.interventions)
    ]


def write_intervention_demos(episode: EpisodeFile, demos_dir: Path) -> list[Path]:
    """Write ``intervention_demos(episode)`` as ``<demos_dir>/<task>/<episode>-intervention-<k>.episode``."""
    paths = []
    for demo in intervention_demos(episode):
        path = demos_dir / episode.task / f"{demo.episode_id}.episode"
        write_episode(path, demo)
        paths.append(path)
    return paths
