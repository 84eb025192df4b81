"""A person's rows at the control rate, each held for a few ticks: what the recorder and a takeover
during RL (``learner.episode.person``) share.

Each row goes to the robot server as a chunk of itself followed by ``hold`` copies
(``TeleopSettings.record_hold_ticks``). The next row, sent within the tick, preempts the copies
before they run; when it comes late (a stalled machine) a copy runs, so the arm keeps the
person's last command for that tick rather than standing still, and the tick still has a row. The
server says how many rows each chunk ran (``ChunkAccepted.previous_rows_run`` of the chunk after
it), so every tick is recorded with the row that ran at it (``ticks``), a copy as a repeat.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from pde_contract.messages import ActionChunk, ActionSpace, ChunkAccepted, Observation, RobotState, Status
from teleop.base import TeleopError, TeleopSource


class SubmitsChunks(Protocol):
    def submit_chunk(self, chunk: ActionChunk) -> ChunkAccepted: ...


@dataclass(frozen=True)
class RanRow:
    """One tick of a person's rows: the row that ran at ``tick`` (``copy`` > 0: the ``copy``-th
    repeat of the row sent at ``sent_index``, the next row having come late)."""

    sent_index: int
    tick: int
    row: np.ndarray
    copy: int


def hold_copies(hold_ticks: int, pacing: str | None) -> int:
    """Copies per person row: ``hold_ticks`` on a realtime server; none under fast pacing (the
    sim's tests), which runs a chunk's rows back to back, so copies would run at once."""
    return hold_ticks if pacing == "realtime" else 0


@dataclass
class HeldRows:
    """Person rows sent one per tick, each with ``hold`` copies, and which ran at which tick."""

    client: SubmitsChunks
    episode_id: str
    control_rate_hz: float
    hold: int
    sent: list[tuple[int, np.ndarray]] = field(default_factory=list)  # per row: its start tick, the row
    # rows each chunk but the last ran, as the next one's reply said
    previous_runs: list[int] = field(default_factory=list)
    clipped: int = 0  # rows the server's safety layer clipped among those sent
    last_seq: int = -1  # the seq of the newest chunk sent

    def send(self, row: np.ndarray, seq: int) -> tuple[ActionChunk, ChunkAccepted]:
        """Send ``row`` (float32 on the wire and on disk) and its copies; it runs at the server's
        next tick, preempting whatever runs (the previous row's copies, a policy's chunk)."""
        row = np.asarray(row, dtype=np.float32)
        chunk = ActionChunk(
            seq=seq,
            episode_id=self.episode_id,
            action_space=ActionSpace.EE_DELTA,
            actions=np.repeat(row[None], 1 + self.hold, axis=0),
            control_rate_hz=self.control_rate_hz,
            sent_time_s=time.time(),
        )
        accepted = self.client.submit_chunk(chunk)
        self.clipped += accepted.steps_clipped
        if self.sent:  # the first one's reply speaks of a chunk before the person's (or none)
            self.previous_runs.append(accepted.previous_rows_run)
        self.sent.append((accepted.start_tick, row))
        self.last_seq = seq
        return chunk, accepted

    def has_run(self, st: Status, due_tick: int) -> bool:
        """The rule a person's row is waited on, the recorder's and a takeover's: the row sent for
        ``due_tick`` (or one that a change of the device sent in its place before that tick) has
        run once the server's tick counter (``Status.tick``) is past that tick. A row the device's
        change sent for a later tick is not waited for (the next read replaces it): a device whose
        every read differs (a hand's jitter) was chased for ever. A server that does not count its
        ticks (-1; the recorder refuses one): once the newest chunk runs no more, or only its copies
        are left to run."""
        if st.tick >= 0 and due_tick >= 0:
            return st.tick > due_tick
        return st.executing_chunk_seq != self.last_seq or st.steps_remaining <= self.hold

    def runs(self, last_ran: int) -> list[int]:
        """Rows each sent chunk ran (its row, then copies), the last having run ``last_ran``."""
        self._require_counts()
        if not 0 <= last_ran <= 1 + self.hold:
            raise TeleopError(
                f"the robot server ran {last_ran} rows of a person's last chunk of {1 + self.hold} "
                "rows: another client moved the arm meanwhile; record it again"
            )
        return [*self.previous_runs, last_ran]

    def runs_before_still(self) -> list[int]:
        """``runs`` when the last row sent was a still row ending the take (zero motion, sent to
        replace the copies not run yet): its reply said how many rows the chunk before it ran. The
        still row is forgotten (it holds the arm as a stop would; nobody commanded it)."""
        self._require_counts()
        self.sent.pop()
        return self.runs(self.previous_runs.pop())

    def _require_counts(self) -> None:
        if any(n < 0 for n in self.previous_runs):
            raise TeleopError(
                "the robot server does not say how many rows a replaced chunk ran "
                "(ChunkAccepted.previous_rows_run): update it to send a person's rows"
            )

    def runs_of_total(self, ran_total: int) -> list[int]:
        """``runs``, the last chunk's from ``ran_total``: all the rows the server ran (its step
        counter) while the rows were sent, none but the person's."""
        return self.runs(ran_total - sum(self.previous_runs))

    def ticks(self, runs: list[int]) -> Iterator[RanRow]:
        """Every tick a row ran at, in order, given ``runs`` (from ``runs`` or ``runs_of_total``)."""
        for i, ((start_tick, row), n) in enumerate(zip(self.sent, runs, strict=True)):
            for k in range(n):
                yield RanRow(i, start_tick + k, row, k)


@dataclass
class Following:
    """A ``rereadable`` source followed the whole tick: read again at every poll between the
    per-tick reads (the recorder's, a takeover's), and when its row differs from the last one sent,
    the new row is sent at once, so it runs at the server's next tick (a push anywhere in a tick
    waits for that tick, not for the next per-tick read and the tick after it). A row replaced
    before it ran runs at no tick (its reply's count says 0) and is recorded nowhere."""

    rows: HeldRows
    source: TeleopSource
    period_s: float
    # sends a changed row: ``rows.send`` with the caller's next seq, and whatever the caller notes
    # of each row it sends (the same function as its per-tick sends)
    send: Callable[[np.ndarray], object]
    ended: bool = False  # a read ended the take (that read's row is not sent)

    def poll(self) -> bool:
        """Read the source once, send its row if it changed; True once a read ended the take."""
        if not self.ended:
            cmd = self.source.read(self.period_s)
            if cmd.end:
                self.ended = True
            else:
                row = cmd.ee_delta_row().astype(np.float32)
                if not np.array_equal(row, self.rows.sent[-1][1]):
                    self.send(row)
        return self.ended


def read_when_due(ran_at_s: float, period_s: float, margin_s: float, poll: Callable[[], bool | None]) -> None:
    """After a row ran (seen at ``ran_at_s``, monotonic), wait until ``margin_s`` before the next
    tick is due, calling ``poll`` meanwhile (it returns True to stop waiting: the take ended): the
    device is read then, as late as leaves the next row time to reach the server (a read that
    comes too late costs a copy, not a tick)."""
    read_at = ran_at_s + period_s - margin_s
    while time.monotonic() < read_at:
        if poll():
            return
        time.sleep(_POLL_S)


# Between polls of the device and the observations while a read is not due: small beside the 100 ms
# period, and no faster (polling every 2 ms the whole margin starved the server on 2 cores:
# docs/teleop.md).
_POLL_S = 0.005


class TickStream:
    """What the server showed of each control tick while a person's rows ran, by tick number
    (Observation.tick, Status.tick: ticks run when the state was read): the first observation with
    camera frames of each tick (the state a row run at that tick starts from) and the measured
    state, from observations and status polls alike."""

    def __init__(self, first: Observation) -> None:
        self.first = self.newest = first
        self.frames: dict[int, Observation] = {}
        self.states: dict[int, RobotState] = {}
        self.see(first)

    def see(self, obs: Observation | None) -> None:
        if obs is None or not obs.cameras:
            return
        self.newest = obs
        if obs.tick >= 0:
            self.frames.setdefault(obs.tick, obs)
            self.states.setdefault(obs.tick, obs.state)

    def status(self, st: Status) -> int:
        """Keeps the status's state; returns its tick."""
        if st.state is not None and st.tick >= 0:
            self.states.setdefault(st.tick, st.state)
        return st.tick

    def observation_at(self, tick: int) -> tuple[Observation, bool]:
        """The observation a row run at ``tick`` starts from, and whether it is stale: one of that
        tick, else the newest from before (the camera stream published none that was seen)."""
        obs = self.frames.get(tick)
        if obs is not None:
            return obs, False
        earlier = [t for t in self.frames if t < tick]
        return (self.frames[max(earlier)] if earlier else self.first), True

    def state_after(self, tick: int) -> tuple[RobotState, bool]:
        """The state measured right after ``tick`` ran, and whether it is late: the one of tick + 1,
        else the first measured after it (nothing was seen of that tick)."""
        state = self.states.get(tick + 1)
        if state is not None:
            return state, False
        return self.states[min(t for t in self.states if t > tick + 1)], True
