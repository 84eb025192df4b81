"""A person driving (HIL-SERL style): a takeover is the episode switching from the policy's driver
to this one until the person hands back.

When the teleop source's ``wants_control()`` says so (a SpaceMouse past its deadband), or
``takeover_requested()`` does (the page's button, passed in by the loop), the policy's chunk is
preempted at the next tick by the person's first row; the person's rows then run one per tick
through the server's safety path (each with hold copies that the next row replaces:
``teleop.held``, as the recorder sends them; a SpaceMouse is followed between the per-tick reads,
a change sent at once) until the source ends the take, and the policy's next chunk starts from
the state the person left. Each tick a person's row ran at (a copy, when the next row came late,
as the row repeated) is a ChunkRecord with ``commanded_by="person"`` and no trace (PPO leaves it
out); each take is an ``Intervention`` in the episode file.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from learner.episode.session import RobotSession, Running, Waited
from learner.episode.settings import ActorSettings
from pde_contract.episodes import ChunkRecord
from pde_contract.messages import Observation
from teleop.base import TeleopSource
from teleop.held import Following, HeldRows, TickStream, hold_copies, read_when_due
from teleop.settings import TeleopSettings

log = logging.getLogger(__name__)


@dataclass
class TakeoverWatch:
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
class Take:
    """How a person's take went."""

    running: Running | None  # the policy's chunk, still running when the person sent no row
    observation: Observation  # the newest after the take (what the policy infers from next)
    stopped: bool  # should_stop() ended the episode during the take
    records: list[ChunkRecord] = field(default_factory=list)  # one per tick a person's row ran at
    trigger: Literal["device", "request"] = "device"
    start_tick: int = -1  # the tick the person's first row ran at


@dataclass
class _Rows:
    """A take under way: the rows sent so far and what the server showed meanwhile."""

    rows: HeldRows
    seen: TickStream
    running: Running | None  # the policy's chunk until the person's first row preempts it
    sent: list[tuple[Observation, float]] = field(default_factory=list)  # per row: newest obs, send time
    follow: Following | None = None


class PersonDriver:
    """The person at ``watch.person``; their rows are sent as the recorder's: record_hold_ticks,
    record_read_margin_s of ``teleop`` (read from the environment at the first take, not by an
    actor nobody takes over from)."""

    def __init__(
        self,
        session: RobotSession,
        settings: ActorSettings,
        teleop: Callable[[], TeleopSettings],
        watch: TakeoverWatch,
        episode_id: str,
    ) -> None:
        self.session, self.settings, self.teleop = session, settings, teleop
        self.watch, self.episode_id = watch, episode_id

    def take(self, running: Running | None, obs: Observation, should_stop: Callable[[], bool]) -> Take:
        """A person's take: their rows, one per tick with hold copies, until the source ends it.
        The first row preempts ``running`` at the server's next tick (its record then says where it
        stopped). A ``rereadable`` source (the SpaceMouse) is followed between the per-tick reads as
        the recorder follows it (``teleop.held.Following``). Each tick a person's row ran at is
        recorded, a copy as the row repeated."""
        person = self.watch.person
        assert person is not None, "a take needs a person"
        teleop, period_s = self.teleop(), 1.0 / self.session.control_rate_hz
        hold = hold_copies(teleop.record_hold_ticks, self.session.pacing)
        rows = HeldRows(self.session.client, self.episode_id, self.session.control_rate_hz, hold)
        t = _Rows(rows, TickStream(self.session.newest_observation(obs)), running)
        person.start_take(float(t.seen.newest.state.gripper_width_m))
        if hold and person.rereadable:
            t.follow = Following(rows, person, period_s, lambda row: self._send(t, row))
        stopped = self._drive(t, person, should_stop, period_s, teleop.record_read_margin_s)
        obs = t.seen.newest
        if not rows.sent:
            if stopped:  # before the person's first row: the policy's chunk is stopped here
                self.session.stop(t.running)
                t.running = None
            return Take(t.running, obs, stopped)
        end_seq, runs = self._hand_back(t, stopped)
        records = list(self._records(t, runs))
        log.info(
            "%s: a person took over (%s) for %d rows (%d repeated: a row came late)",
            self.episode_id,
            self.watch.trigger,
            len(records),
            sum(max(0, n - 1) for n in runs),
        )
        if not stopped:
            obs = self.session.fresh_observation(obs.seq, after_chunk_seq=end_seq)
        return Take(None, obs, stopped, records, self.watch.trigger, rows.sent[0][0])

    def _send(self, t: _Rows, row: np.ndarray) -> None:
        chunk, accepted = t.rows.send(row, self.session.next_seq())
        if t.running is not None:  # the policy's chunk ran until the person's first row
            t.running.preempted_at(accepted.start_tick)
            t.running = None
        t.sent.append((t.seen.newest, chunk.sent_time_s))

    def _drive(
        self,
        t: _Rows,
        person: TeleopSource,
        should_stop: Callable[[], bool],
        period_s: float,
        read_margin_s: float | None,
    ) -> bool:
        """The person's rows, one per tick, until the source ends the take or ``takeover_max_s``;
        True when ``should_stop()`` ended the episode meanwhile."""

        def poll() -> bool:
            """Between the per-tick reads: the observations, and the device followed; True once
            the person ended the take."""
            t.seen.see(self.session.newest_observation(t.seen.newest))
            return t.follow is not None and t.follow.poll()

        for _ in range(max(1, math.ceil(self.settings.takeover_max_s * self.session.control_rate_hz))):
            # Asked before each of the person's rows: a row's wait asks it only after
            # stop_check_period_s (a tick), which the take's waits do not last.
            if should_stop():
                return True
            cmd = person.read(period_s)
            if cmd.end:
                return False
            self._send(t, cmd.ee_delta_row())
            due = t.rows.sent[-1][0]
            ran = functools.partial(t.rows.has_run, due_tick=due)
            waited = self.session.wait(self.session.seq, ran, should_stop, poll)
            if waited is Waited.STOPPED:
                return True
            if poll():
                return False
            if t.rows.hold and read_margin_s is not None:
                read_when_due(time.monotonic(), period_s, read_margin_s, poll)
            if t.follow is not None and t.follow.ended:
                return False
        return False

    def _hand_back(self, t: _Rows, stopped: bool) -> tuple[int, list[int]]:
        """The take ends; returns the seq of the last chunk sent, and the rows each chunk ran."""
        rows = t.rows
        if not rows.hold:
            if stopped:
                self.session.client.stop()
            return self.session.seq, [1] * len(rows.sent)  # each one-row chunk was waited for until it ran
        # A still row (no motion, the gripper as the last row left it) replaces the last row's
        # copies not run yet, and its reply says how many ran; then the arm holds.
        still = np.zeros(rows.sent[-1][1].shape, dtype=np.float32)
        still[6] = rows.sent[-1][1][6]
        end_seq = rows.send(still, self.session.next_seq())[0].seq
        self.session.client.stop()
        return end_seq, rows.runs_before_still()

    def _records(self, t: _Rows, runs: list[int]) -> Iterator[ChunkRecord]:
        for r in t.rows.ticks(runs):
            own, sent_time_s = t.sent[r.sent_index]
            # a copy starts from the state of its own tick where one was seen
            at_tick, _stale = t.seen.observation_at(r.tick)
            yield ChunkRecord(
                observation=at_tick if r.copy and at_tick.tick > own.tick else own,
                actions=r.row[None],
                sent_time_s=sent_time_s,
                rows_run=(0, 1),
                commanded_by="person",
            )
