"""The demonstration recorder: one take of a task from a ``TeleopSource``, at the control rate.

Commanded sources (SpaceMouse, keyboard, scripted): per tick the recorder reads the source and
sends its ee_delta row through ``RobotClient.submit_chunk`` (the server's safety path, as every
policy chunk), followed by ``TeleopSettings.record_hold_ticks`` copies of itself (``teleop.held``,
shared with a takeover during RL); then it polls
``GetStatus`` until the server's tick counter (``Status.tick``) shows the row ran, and reads the
next ``record_read_margin_s`` before the next tick is due (the device's state of that tick). A
``rereadable`` source (the SpaceMouse) is followed the whole tick in between: when its row changes,
the new row is sent at once and runs at the server's next tick (``teleop.held.Following``), so a
push waits for the next tick only, not for the next read. The
next row, sent within the tick, replaces the copies before they run; only when it comes late (a
stalled machine) does a copy run, so the arm keeps the person's last command for that tick rather
than standing still, and the tick is recorded with the row that ran (counted repeated), never
left without one (the cause of the rows counted dropped before: one row in flight, read only
after the previous ran, so any stall past the rest of a tick lost that tick). Every row of the
person's runs exactly once, and each row's tick is known (``ChunkAccepted.start_tick``; its
copies run on the ticks after it, as many as the next row's ``previous_rows_run`` says), so the take is
put together by tick: the observation of the tick a row ran at (the state it starts from; the
newest before when the camera stream published none the recorder saw, counted stale) and the
state measured at the next tick (the joint_abs twin). The server's own counters (rows executed,
watchdog trips) check every take; bench/bench_record.py counts them under load.

Guided sources (hand guiding): the server is put in guiding mode and nothing is commanded; the
recorder samples the measured state on the control-rate grid of the robot's clock and writes, per
tick, the equivalent ee_delta row (the measured TCP motion to the next sample, as the server would
apply it: position + d, rotation exp(drot) * R in the base frame) and joint_abs row (the next
sample's joints). A tick's state comes from a ``GetStatus`` poll or from the observation published
with it, whichever arrives first.

Every take gives both action spaces: ee_delta (what SFT trains by default) and joint_abs (the
measured joints after each row, with the commanded or measured gripper width).
"""

from __future__ import annotations

import itertools
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pde_contract.client import RobotClient, RobotServerError
from pde_contract.episodes import ChunkRecord, EpisodeFile
from pde_contract.messages import ActionSpace, ErrorCode, Observation, RobotState, Status
from pde_contract.rotations import rotvec_between
from pde_contract.tasks import TaskSpec
from teleop.base import TeleopError, TeleopSource
from teleop.held import Following, HeldRows, TickStream, hold_copies, read_when_due
from teleop.settings import TeleopSettings

# A sample on the robot clock counts for the grid point it is nearest when within this fraction of
# a period before it (sim clocks step by whole periods; the FR3's by milliseconds).
_GRID_TOLERANCE = 0.25
# Between GetStatus polls while a row waits for its tick: small beside the 100 ms period, and each
# poll also feeds the server's watchdog.
_STATUS_POLL_S = 0.002


@dataclass(frozen=True)
class TakeStats:
    """How one take went, counted (never timed): what bench/bench_record.py reports."""

    rows_expected: int  # control ticks from the take's first row to its last (server or robot clock)
    rows_recorded: int  # rows in the episode
    rows_dropped: int  # ticks of that span with no recorded row
    # Rows recorded with an observation from before their tick (the camera stream lagged).
    # Commanded takes: rows the server executed during the take (steps_executed), chunks it
    # preempted (each row's chunk replaces the copies of the one before), rows its safety layer
    # clipped among those sent (the row on disk is the one sent; the arm went less far), and its
    # watchdog trips (the recorder was silent for heartbeat_timeout_s; a take that lost rows to
    # one is refused). None for guided takes, which command nothing.
    rows_stale_observation: int
    rows_executed: int | None
    chunks_preempted: int | None
    rows_clipped: int | None
    rows_watchdog_dropped: int | None
    duration_s: float  # wall clock, for the operator
    # Commanded takes: rows that ran as a copy of the row before (the next row came a tick late:
    # TeleopSettings.record_hold_ticks), and rows whose measured joints (the joint_abs twin) come
    # from a later tick than the one right after them (the recorder saw no state of that tick).
    rows_repeated: int | None = None
    rows_state_late: int | None = None


@dataclass
class Take:
    task: str
    source: str
    episodes: dict[ActionSpace, EpisodeFile]
    stats: TakeStats
    task_success: bool | None  # the simulator's check at the end (None on hardware)


@dataclass
class _Rows:
    """What a take recorded, before it becomes episode files."""

    observations: list[Observation]  # per row: what it was chosen from (guided: its start)
    ee_delta: list[np.ndarray]
    joint_abs: list[np.ndarray]
    ticks_spanned: int  # robot-clock ticks from the first row to the last
    task_success: bool | None
    stale: int = 0
    executed: int | None = None
    preempted: int | None = None
    clipped: int | None = None
    watchdog_dropped: int | None = None
    repeated: int | None = None
    state_late: int | None = None


class Recorder:
    def __init__(self, client: RobotClient, settings: TeleopSettings | None = None) -> None:
        self.client = client
        self.settings = settings or TeleopSettings()
        info = client.info or client.connect()
        self.control_rate_hz = info.control_rate_hz
        self.period_s = 1.0 / info.control_rate_hz

    def reset(self, task: TaskSpec, seed: int | None = None) -> None:
        """Home (or the task's reset pose); the sim also lays out the task's scene."""
        self.client.reset(task=task.name, seed=seed, reset_joints_rad=task.reset_joints_rad)

    def record(
        self,
        source: TeleopSource,
        task: TaskSpec,
        seed: int | None = None,
        on_row: Callable[[int], None] | None = None,
    ) -> Take:
        """Record one take, until the source ends it or ``max_take_s`` of rows."""
        max_rows = max(1, math.ceil(self.settings.max_take_s * self.control_rate_hz))
        t0 = time.monotonic()
        if source.guided:
            rec = self._guided(source, max_rows, on_row)
        else:
            rec = self._commanded(source, max_rows, on_row)
        n = len(rec.ee_delta)
        stats = TakeStats(
            rows_expected=rec.ticks_spanned,
            rows_recorded=n,
            rows_dropped=max(0, rec.ticks_spanned - n),
            rows_stale_observation=rec.stale,
            rows_executed=rec.executed,
            chunks_preempted=rec.preempted,
            rows_clipped=rec.clipped,
            rows_watchdog_dropped=rec.watchdog_dropped,
            duration_s=round(time.monotonic() - t0, 3),
            rows_repeated=rec.repeated,
            rows_state_late=rec.state_late,
        )
        episode_id = uuid.uuid4().hex
        label = f"{'guiding' if source.guided else 'teleop'}:{source.name}"
        episodes = {
            space: EpisodeFile(
                episode_id=f"{episode_id}-{space.value}",
                task=task.name,
                canonical_prompt=task.prompt,
                rollout_prompt=task.prompt,
                action_space=space,
                control_rate_hz=self.control_rate_hz,
                chunks=[
                    ChunkRecord(observation=obs, actions=row[None].astype(np.float32))
                    for obs, row in zip(rec.observations, rows, strict=True)
                ],
                seed=seed,
                source=label,
            )
            for space, rows in ((ActionSpace.EE_DELTA, rec.ee_delta), (ActionSpace.JOINT_ABS, rec.joint_abs))
        }
        return Take(task.name, label, episodes, stats, rec.task_success)

    # --- commanded: rows through the safety path -------------------------------------------------

    def _commanded(self, source: TeleopSource, max_rows: int, on_row: Callable[[int], None] | None) -> _Rows:
        client = self.client
        info = client.info or client.connect()
        hold = hold_copies(self.settings.record_hold_ticks, info.pacing)
        before = client.status()
        if before.tick < 0:
            raise TeleopError(
                "the robot server does not report its control tick (Status.tick): update it to "
                "record commanded takes"
            )
        episode_id = f"take-{uuid.uuid4().hex}"
        first = self._wait_observation(lambda _obs: True, "no observation")
        ticks = TickStream(first)
        source.start_take(float(first.state.gripper_width_m))
        rows = HeldRows(client, episode_id, self.control_rate_hz, hold)
        margin_s = self.settings.record_read_margin_s if hold else None
        seqs = itertools.count()
        # a device whose reads consume nothing is followed the whole tick: a changed row is sent at
        # once and runs at the next tick (teleop.held.Following)
        follow = (
            Following(rows, source, self.period_s, lambda row: rows.send(row, next(seqs)))
            if hold and source.rereadable
            else None
        )

        def see(obs: Observation | None) -> None:
            ticks.see(obs)
            if follow is not None:
                follow.poll()

        def ended() -> bool:
            return follow is not None and follow.ended

        def poll() -> bool:
            see(self._poll_observation())
            return ended()

        for n_read in range(1, max_rows + 1):
            cmd = source.read(self.period_s)
            if cmd.end:
                break
            seq = next(seqs)
            due = rows.send(cmd.ee_delta_row(), seq)[1].start_tick

            # The next row is read only after this one ran (``HeldRows.has_run``), so it replaces
            # copies only (or nothing: the watchdog dropped the chunk in a stall).
            def ran(st: Status, due: int = due) -> bool:
                ticks.status(st)  # keeps its state: the joint_abs twin of the row before
                return rows.has_run(st, due) or ended()

            self._poll_until(ran, see, f"row {seq} was accepted but did not run")
            if ended():
                break
            if on_row is not None:
                on_row(n_read)
            if margin_s is not None:
                read_when_due(time.monotonic(), self.period_s, margin_s, poll)
                if ended():
                    break
        if not rows.sent:
            raise TeleopError("the take ended before its first row: nothing recorded")
        client.stop()  # the last row's copies, if any are left, do not run
        # past every copy that could have run: the last row's joints are measured after it
        past_tick = rows.sent[-1][0] + 1 + hold
        after = self._poll_until(lambda st: ticks.status(st) > past_tick, ticks.see, "the take did not stop")
        return _commanded_rows(rows, ticks, before, after)

    def _poll_until(
        self, done: Callable[[Status], bool], see: Callable[[Observation | None], None], what: str
    ) -> Status:
        """Poll ``GetStatus`` until ``done``; every observation that arrives meanwhile (and one more
        after) goes to ``see``. Raises when the arm stops (e-stop, fault) or nothing happens."""
        deadline = time.monotonic() + self.settings.observation_timeout_s
        while True:
            see(self._poll_observation())
            st = self.client.status()
            if st.state is not None and done(st):
                see(self._poll_observation())
                return st
            if st.estopped or st.fault_action or time.monotonic() > deadline:
                raise TeleopError(
                    f"{what} (e-stop: {st.estopped}, fault: {st.fault.value} {st.fault_detail}, last "
                    f"error: {st.last_error or 'none'}); the take is stopped: clear the cause, then "
                    "record it again"
                )
            time.sleep(_STATUS_POLL_S)

    def _tick_of(self, first: RobotState, state: RobotState) -> int:
        return _ticks(state.robot_time_s - first.robot_time_s, self.period_s)

    def _poll_observation(self) -> Observation | None:
        """The newest observation since the last read, without waiting; None when none came."""
        try:
            return self.client.latest_observation(0.0)
        except RobotServerError as e:
            if e.code is ErrorCode.TIMEOUT:
                return None
            raise

    def _wait_observation(self, wanted: Callable[[Observation], bool], what: str) -> Observation:
        """The newest observation with camera frames for which ``wanted`` holds."""
        timeout_s = self.settings.observation_timeout_s
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            obs = self.client.latest_observation(left)
            if obs.cameras and wanted(obs):
                return obs
        raise TeleopError(
            f"{what} within {timeout_s} s: is the robot server running, and its arm not stopped "
            "(e-stop, fault)? Check `pde robot-server status`"
        )

    # --- guided: sample the measured state -------------------------------------------------------

    def _guided(self, source: TeleopSource, max_rows: int, on_row: Callable[[int], None] | None) -> _Rows:
        client = self.client
        client.set_guiding_mode(True)
        by_time: dict[float, Observation] = {}  # observations by the robot time of their state
        by_tick: dict[int, RobotState] = {}  # the first state seen of each tick of the grid

        def keep(state: RobotState) -> None:
            by_tick.setdefault(self._tick_of(by_tick[0], state), state)

        def see(obs: Observation | None) -> None:
            # an observation carries its tick's state too: it fills a tick the polls missed
            if obs is not None and obs.cameras:
                by_time[obs.state.robot_time_s] = obs
                if by_tick:
                    keep(obs.state)

        try:
            see(self._wait_observation(lambda _obs: True, "no observation while guiding"))
            st = self._poll_until(lambda _st: True, see, "no state while guiding")
            assert st.state is not None
            by_tick[0] = st.state
            source.start_take(float(st.state.gripper_width_m))
            tick = 0  # ticks of the take so far: one source read each
            while tick < max_rows and not source.read(self.period_s).end:
                tick += 1
                if tick > max(by_tick):  # not seen yet: wait for it on the robot's clock

                    def on_grid(st: Status, tick: int = tick) -> bool:
                        assert st.state is not None
                        keep(st.state)
                        return self._tick_of(by_tick[0], st.state) >= tick

                    self._poll_until(on_grid, see, "the robot clock stopped while guiding")
                if on_row is not None:
                    on_row(tick)
        finally:
            client.set_guiding_mode(False)
        states = [by_tick[k] for k in sorted(by_tick) if k <= tick]  # not past the take's end
        if len(states) < 2:
            raise TeleopError("the take ended before the first tick: nothing recorded")
        # a tick missing from both streams leaves one row spanning two ticks: counted as dropped
        rec = _Rows([], [], [], self._tick_of(states[0], states[-1]), None)
        seen_times = sorted(by_time)
        for a, b in itertools.pairwise(states):
            d_pos = np.asarray(b.ee_position_m) - np.asarray(a.ee_position_m)
            d_rot = rotvec_between(a.ee_quat_xyzw, b.ee_quat_xyzw)
            rec.ee_delta.append(np.concatenate([d_pos, d_rot, [b.gripper_width_m]]))
            rec.joint_abs.append(np.append(b.joint_positions_rad, b.gripper_width_m))
            # the frames published with this tick's state; else the newest from before (stale)
            obs = by_time.get(a.robot_time_s)
            if obs is None:
                rec.stale += 1
                earlier = [t for t in seen_times if t <= a.robot_time_s] or seen_times[:1]
                obs = by_time[earlier[-1]]
            rec.observations.append(obs)
        rec.task_success = by_time[seen_times[-1]].task_success
        return rec


def _commanded_rows(rows: HeldRows, ticks: TickStream, before: Status, after: Status) -> _Rows:
    """A commanded take put together by tick: every tick a row ran at (``rows.ticks``, a copy as a
    repeat), with the observation of its tick and the state measured after it; ``before`` and
    ``after``: the server's status before the take's first row and once it had stopped."""
    ran_total = after.counters.steps_executed - before.counters.steps_executed
    runs = rows.runs_of_total(ran_total)
    rec = _Rows([], [], [], 0, None, clipped=rows.clipped, repeated=0)
    for r in rows.ticks(runs):
        obs, stale = ticks.observation_at(r.tick)
        state, late = ticks.state_after(r.tick)
        rec.stale += stale
        rec.state_late = (rec.state_late or 0) + late
        rec.repeated = (rec.repeated or 0) + (r.copy > 0)
        rec.observations.append(obs)
        rec.ee_delta.append(r.row.astype(np.float64))
        rec.joint_abs.append(np.append(state.joint_positions_rad, r.row[6]))
    if not rec.ee_delta:
        raise TeleopError("no row of the take ran (the robot server's watchdog dropped them)")
    first_tick = next(t for (t, _), n in zip(rows.sent, runs, strict=True) if n > 0)
    rec.ticks_spanned = max(t + n for (t, _), n in zip(rows.sent, runs, strict=True)) - first_tick
    rec.executed = ran_total
    rec.preempted = after.counters.chunks_preempted - before.counters.chunks_preempted
    rec.watchdog_dropped = after.counters.watchdog_trips - before.counters.watchdog_trips
    rec.task_success = ticks.newest.task_success
    return rec


def _ticks(span_s: float, period_s: float) -> int:
    """Control ticks in ``span_s`` of the robot's clock."""
    return max(0, math.floor(span_s / period_s + _GRID_TOLERANCE))
