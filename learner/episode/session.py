"""The robot session at the bottom of an episode: observe, submit, stop, and the tick bookkeeping
(which chunk runs, which of its rows ran), over one connected robot client.

Everything here speaks to the robot server and nothing else: the clocks (``clock.py``) decide when
to look, the drivers (``drivers.py``, ``person.py``) what to send.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from learner.episode.settings import ActorSettings
from pde_contract.client import RobotServerError
from pde_contract.episodes import ChunkRecord
from pde_contract.messages import ActionChunk, ChunkAccepted, ErrorCode, Observation, ServerInfo, Status
from pde_contract.seam import rows_run

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


class Waited(enum.Enum):
    """How a wait on the server ended."""

    DONE = "done"  # what was waited for happened (a chunk ran, or is within rows_left of its end)
    STOPPED = "stopped"  # should_stop() said stop
    INTERRUPTED = "interrupted"  # interrupt() said so: a person takes over (or ends their take)


def _server_silent(seq: int, silent_s: float) -> RobotServerError:
    # Shown on the page: what the operator does, not the client's link-key hints.
    return RobotServerError(
        ErrorCode.TIMEOUT,
        f"the robot server has not answered for {silent_s:.1f} s during chunk {seq}: "
        "is `pde robot-server` running?",
    )


@dataclass
class Running:
    """The chunk the server runs now, and where its record will say which rows ran."""

    record: ChunkRecord
    accepted: ChunkAccepted
    n_rows: int

    @property
    def seq(self) -> int:
        return self.accepted.seq

    def preempted_at(self, next_start_tick: int | None) -> None:
        """The next chunk (the policy's or a person's), or a stop, took over at ``next_start_tick``
        (None or -1: unknown, so every row is taken to have run)."""
        self.record.rows_run = rows_run(
            self.accepted.rows_skipped, self.n_rows, self.accepted.start_tick, next_start_tick
        )


def chunk_done(seq: int, rows_left: int = 0) -> Callable[[Status], bool]:
    """Chunk ``seq`` has run, or has at most ``rows_left`` rows still to run."""
    return lambda st: st.executing_chunk_seq != seq or st.steps_remaining <= rows_left


class RobotSession:
    """One connected robot client, across episodes: chunk seqs go on increasing from one episode
    to the next (and across restarts of this process: they start from the clock)."""

    def __init__(self, client: RobotClientLike, settings: ActorSettings) -> None:
        self.client = client
        self.settings = settings
        self.seq = int(time.time() * 1000)  # the newest chunk seq used

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

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

    @property
    def pacing(self) -> str | None:
        info = self.client.info
        return None if info is None else info.pacing

    @property
    def fast_paced(self) -> bool:
        return self.pacing == "fast"

    @contextlib.contextmanager
    def heartbeat(self) -> Iterator[None]:
        """The heartbeat runs while an episode does (the server's watchdog holds the arm without)."""
        self.client.start_heartbeat(self.settings.heartbeat_period_s)
        try:
            yield
        finally:
            self.client.stop_heartbeat()

    # --- observe -------------------------------------------------------------------------------

    def fresh_observation(self, newer_than_seq: int, after_chunk_seq: int | None = None) -> Observation:
        """The newest observation published after ``newer_than_seq`` and, when given, after chunk
        ``after_chunk_seq`` stopped executing (so the next chunk sees where the last one ended)."""
        timeout_s = self.settings.obs_timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            obs = self.client.latest_observation(timeout_s=timeout_s)
            if obs.seq > newer_than_seq and (
                after_chunk_seq is None or obs.executing_chunk_seq != after_chunk_seq
            ):
                return obs
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no observation newer than seq {newer_than_seq} within {timeout_s} s; "
                    "is the robot server publishing?"
                )
            time.sleep(self.settings.poll_period_s)

    def newest_observation(self, previous: Observation) -> Observation:
        """The newest observation with camera frames published since the last read; ``previous``
        when none came."""
        try:
            obs = self.client.latest_observation(timeout_s=0.0)
        except RobotServerError as e:
            if e.code is ErrorCode.TIMEOUT:
                return previous
            raise
        return obs if obs.cameras else previous

    # --- wait ----------------------------------------------------------------------------------

    def wait(
        self,
        seq: int,
        done: Callable[[Status], bool],
        should_stop: Callable[[], bool],
        interrupt: Callable[[], bool] | None = None,
    ) -> Waited:
        """Poll ``GetStatus`` while chunk ``seq`` runs until ``done(status)``, unless
        ``should_stop()`` says stop first (asked every ``stop_check_period_s``), or ``interrupt()``
        (asked at every poll) says a person takes over the policy's chunk (or, during a take, ended
        it)."""
        cfg = self.settings
        deadline = time.monotonic() + cfg.chunk_timeout_s
        last_reply_s = time.monotonic()
        next_stop_check_s = last_reply_s + cfg.stop_check_period_s  # asked just before the chunk
        while True:
            if time.monotonic() >= next_stop_check_s:
                next_stop_check_s = time.monotonic() + cfg.stop_check_period_s
                if should_stop():
                    return Waited.STOPPED
            if interrupt is not None and interrupt():
                return Waited.INTERRUPTED
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
            if done(status):
                return Waited.DONE
            if time.monotonic() > deadline:
                raise TimeoutError(f"chunk {seq} still executing after {cfg.chunk_timeout_s} s")
            time.sleep(cfg.poll_period_s)

    def chunk_end_on_stream(self, seq: int, should_stop: Callable[[], bool]) -> Observation | None:
        """A fast-paced server publishes an observation on every tick, so the stream itself says
        when chunk ``seq`` has run (the contract: ``last_chunk_seq`` is it, no rows remaining, not
        executing); waiting on it takes no Status round trips, which were ~16 a chunk and a large
        share of both processes' CPU in a sim episode (bench/bench_episode_throughput.py). The
        observation is the one the Status wait then read: the newest, published by the tick that
        ran the chunk's last row. None when ``should_stop()`` said stop first."""
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

    # --- submit, stop --------------------------------------------------------------------------

    def submit(self, chunk: ActionChunk) -> ChunkAccepted:
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
            chunk.seq, chunk.first_row_tick = self.next_seq(), -1
            return self.client.submit_chunk(chunk)

    def stop(self, running: Running | None) -> None:
        """Hold the arm; the chunk it stopped (if any) then records only the rows that ran."""
        tick = self.client.stop()
        if running is not None:
            running.preempted_at(tick)
