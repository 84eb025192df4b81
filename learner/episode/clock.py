"""When to look next: one clock per timing mode (``ActorSettings.chunk_timing``).

While a chunk runs, a clock waits for the moment the next chunk is inferred and returns the
observation to infer it from (or how the wait ended instead: a stop, a person taking over):

- ``OverlappedClock``: as many ticks before the chunk's end as the slowest recent inference took
  (plus a margin); the next chunk says which tick its row 0 was meant for (``first_row_tick``), and
  the server skips the rows meant for ticks that ran meanwhile (pde_contract.seam).
- ``SyncClock``: after the chunk has run; the arm holds still while the policy infers.
- ``StreamClock``: 'sync' on a fast-paced server (the sim) with nobody to take over: the chunk's end
  read off the observation stream, with no Status polls.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Protocol

from learner.episode.session import RobotSession, Running, Waited, chunk_done
from learner.episode.settings import ActorSettings
from pde_contract.messages import Observation
from pde_contract.seam import inference_lead_ticks

log = logging.getLogger(__name__)


class Clock(Protocol):
    # False: the chunk has run whenever the clock looks (nothing left to wait for at the end)
    overlapping: bool

    def look(
        self, running: Running, obs: Observation, interrupt: Callable[[], bool] | None
    ) -> Observation | Waited:
        """Wait while ``running`` runs; the observation to infer the next chunk from (newer than
        ``obs``), or ``Waited.STOPPED`` / ``Waited.INTERRUPTED`` (``interrupt()`` said so)."""
        ...

    def inferred(self, inference_s: float) -> None:
        """An inference took ``inference_s``."""
        ...

    def first_row_tick(self, obs: Observation, running: Running | None) -> int:
        """The tick row 0 of a chunk inferred from ``obs`` is meant for (-1: whenever it arrives)."""
        ...


class SyncClock:
    overlapping = False

    def __init__(self, session: RobotSession, should_stop: Callable[[], bool]) -> None:
        self.session, self.should_stop = session, should_stop

    def look(
        self, running: Running, obs: Observation, interrupt: Callable[[], bool] | None
    ) -> Observation | Waited:
        waited = self.session.wait(running.seq, chunk_done(running.seq), self.should_stop, interrupt)
        if waited is not Waited.DONE:
            return waited
        return self.session.fresh_observation(obs.seq, after_chunk_seq=running.seq)

    def inferred(self, inference_s: float) -> None:
        pass

    def first_row_tick(self, obs: Observation, running: Running | None) -> int:
        return -1  # the arm held still while the policy inferred: nothing to skip


class StreamClock(SyncClock):
    """Never interrupted: chosen only when nobody can take over."""

    def look(
        self, running: Running, obs: Observation, interrupt: Callable[[], bool] | None
    ) -> Observation | Waited:
        ended = self.session.chunk_end_on_stream(running.seq, self.should_stop)
        return Waited.STOPPED if ended is None else ended


class OverlappedClock:
    overlapping = True

    def __init__(
        self, session: RobotSession, settings: ActorSettings, should_stop: Callable[[], bool]
    ) -> None:
        self.session, self.should_stop = session, should_stop
        self.margin_ticks = settings.overlap_margin_ticks
        self.recent_inference_s: collections.deque[float] = collections.deque(
            maxlen=max(1, settings.overlap_window_chunks)
        )

    def look(
        self, running: Running, obs: Observation, interrupt: Callable[[], bool] | None
    ) -> Observation | Waited:
        rate_hz = self.session.control_rate_hz
        lead = inference_lead_ticks(max(self.recent_inference_s), rate_hz, self.margin_ticks)
        waited = self.session.wait(running.seq, chunk_done(running.seq, lead), self.should_stop, interrupt)
        if waited is not Waited.DONE:
            return waited
        return self.session.fresh_observation(obs.seq)

    def inferred(self, inference_s: float) -> None:
        self.recent_inference_s.append(inference_s)

    def first_row_tick(self, obs: Observation, running: Running | None) -> int:
        # The first chunk is inferred while the arm holds still: nothing to skip.
        return obs.tick if running is not None else -1


def episode_clock(
    session: RobotSession, settings: ActorSettings, should_stop: Callable[[], bool], person: bool
) -> Clock:
    """The clock of an episode's chunks (``person``: someone may take over, so a wait polls)."""
    if settings.chunk_timing == "overlapped" and session.fast_paced:
        log.info("the robot server paces fast: chunks run 'sync' (rows outpace inference there)")
    if settings.chunk_timing == "overlapped" and not session.fast_paced:
        return OverlappedClock(session, settings, should_stop)
    if session.fast_paced and not person:
        return StreamClock(session, should_stop)
    return SyncClock(session, should_stop)


def end_clock(session: RobotSession, should_stop: Callable[[], bool]) -> Clock:
    """The clock that waits out the last chunk (nobody takes it over any more)."""
    return StreamClock(session, should_stop) if session.fast_paced else SyncClock(session, should_stop)
