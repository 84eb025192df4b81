"""The demonstration recorder: one take of a task from a ``TeleopSource``, at the control rate.

Commanded sources (SpaceMouse, keyboard, scripted): per tick the recorder reads the source, sends
its ee_delta row as a one-row chunk through ``RobotClient.submit_chunk`` (the server's safety path,
as every policy chunk), and polls ``GetStatus`` until the server's step counter shows the row ran;
only then does it read the source again and send the next. So every row runs exactly once and none
can preempt an earlier one before it ran, and as a status reply takes milliseconds, the next row
reaches the server before its next tick, so rows run on consecutive ticks unless a process
stalls (a tick without a row is counted dropped: bench/bench_record.py). No wait for an observation
is on that path: each row is recorded with an observation published between the previous row's
run and its own (the state it starts from), sorted as they arrive (``_RowObservations``); where the
camera stream published none in that tick, the newest one from before is used and the row counted
as stale. The server's own counters (steps executed, chunks preempted) check every take.

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
from pde_contract.messages import ActionChunk, ActionSpace, ErrorCode, Observation, RobotState, Status
from pde_contract.rotations import rotvec_between
from pde_contract.tasks import TaskSpec
from teleop.base import TeleopError, TeleopSource
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

    rows_expected: int  # control ticks from the take's first row to its last, on the robot's clock
    rows_recorded: int  # rows in the episode
    rows_dropped: int  # ticks of that span with no recorded row
    # Rows recorded with an observation from before the previous row ran (the camera stream
    # lagged). Commanded takes: rows the server executed during the take (steps_executed), chunks
    # it preempted (a row replaced before it ran), rows its safety layer clipped (the row on disk
    # is the one sent; the arm went less far), and rows its watchdog dropped before they ran (the
    # recorder was silent for heartbeat_timeout_s: not in the take, their ticks count as dropped).
    # None for guided takes, which command nothing.
    rows_stale_observation: int
    rows_executed: int | None
    chunks_preempted: int | None
    rows_clipped: int | None
    rows_watchdog_dropped: int | None
    duration_s: float  # wall clock, for the operator


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


class _RowObservations:
    """Sorts the observations that arrive during a commanded take by the row they precede: one
    published while row j waits to run (``executing_chunk_seq == j``), or after row j-1 ran and
    before row j was sent (``last_chunk_seq == j - 1``, nothing executing), shows the state row j
    starts from. Observations published before the take began (its first status reply, on the
    server's clock) are ignored: an earlier take's chunk numbers were the same."""

    def __init__(self, episode_id: str, first: Observation, take_start_s: float) -> None:
        self.episode_id = episode_id
        self.take_start_s = take_start_s
        self.newest = first
        self.before_row: dict[int, Observation] = {0: first}

    def see(self, obs: Observation | None) -> None:
        if obs is None or not obs.cameras:
            return
        self.newest = obs
        if obs.publish_time_s < self.take_start_s:
            return
        if obs.executing_chunk_seq >= 0:
            if obs.episode_id == self.episode_id:
                self.before_row[obs.executing_chunk_seq] = obs
        elif obs.last_chunk_seq >= 0:
            self.before_row[obs.last_chunk_seq + 1] = obs


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
        before = client.status().counters
        take_start_s = client.last_reply.server_time_s if client.last_reply else 0.0
        episode_id = f"take-{uuid.uuid4().hex}"
        first = self._wait_observation(lambda _obs: True, "no observation")
        source.start_take(float(first.state.gripper_width_m))
        watch = _RowObservations(episode_id, first, take_start_s)
        rec = _Rows([], [], [], 0, None, clipped=0, watchdog_dropped=0)
        tick_times_s: list[float] = []
        for seq in range(max_rows):
            cmd = source.read(self.period_s)
            if cmd.end:
                break
            row = cmd.ee_delta_row().astype(np.float32)  # float32 on the wire and on disk
            fallback = watch.newest
            chunk = ActionChunk(
                seq=seq,
                episode_id=episode_id,
                action_space=ActionSpace.EE_DELTA,
                actions=row[None],
                control_rate_hz=self.control_rate_hz,
                sent_time_s=time.time(),
            )
            rec.clipped = (rec.clipped or 0) + client.submit_chunk(chunk).steps_clipped
            # the row ran: the step counter moved past it and nothing executes (the executor
            # updates both with the state the row left); or the watchdog dropped it, the recorder
            # having been silent for heartbeat_timeout_s (a stalled machine): the arm held, the
            # take goes on without the row
            target = before.steps_executed + len(rec.ee_delta) + 1
            trips = before.watchdog_trips + (rec.watchdog_dropped or 0)

            def settled(st: Status, target: int = target, trips: int = trips) -> bool:
                ran = st.counters.steps_executed >= target
                return st.executing_chunk_seq == -1 and (ran or st.counters.watchdog_trips > trips)

            ran = self._poll_until(settled, watch.see, f"row {seq} was accepted but did not run")
            assert ran.state is not None
            obs = watch.before_row.pop(seq, None)
            if ran.counters.steps_executed < target:
                rec.watchdog_dropped = (rec.watchdog_dropped or 0) + 1
                continue
            tick_times_s.append(ran.state.robot_time_s)
            rec.stale += obs is None
            rec.observations.append(obs or fallback)
            rec.ee_delta.append(row.astype(np.float64))
            rec.joint_abs.append(np.append(ran.state.joint_positions_rad, row[6]))
            if on_row is not None:
                on_row(len(rec.ee_delta))
        after = client.status().counters
        if not rec.ee_delta:
            raise TeleopError("the take ended before its first row: nothing recorded")
        rec.ticks_spanned = _ticks(tick_times_s[-1] - tick_times_s[0], self.period_s) + 1
        rec.executed = after.steps_executed - before.steps_executed
        rec.preempted = after.chunks_preempted - before.chunks_preempted
        rec.task_success = watch.newest.task_success
        return rec

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


def _ticks(span_s: float, period_s: float) -> int:
    """Control ticks in ``span_s`` of the robot's clock."""
    return max(0, math.floor(span_s / period_s + _GRID_TOLERANCE))
