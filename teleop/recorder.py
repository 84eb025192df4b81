"""The demonstration recorder: one take of a task from a ``TeleopSource``, at the control rate.

Commanded sources (SpaceMouse, keyboard, scripted): per tick the recorder reads the source, sends
its ee_delta row as a one-row chunk through ``RobotClient.submit_chunk`` (the server's safety path,
as every policy chunk), and waits for the observation that shows the row executed; that observation
is the next row's. So each recorded row has the observation it was chosen from and was executed
exactly once, and no row can preempt an earlier one before it ran: with the server's realtime
pacing the rows run on consecutive ticks as long as an observation reaches the recorder within a
tick. The server's own counters (steps executed, chunks preempted) check it after every take.

Guided sources (hand guiding): the server is put in guiding mode and nothing is commanded; the
recorder samples the measured state on the control-rate grid of the robot's clock and writes, per
tick, the equivalent ee_delta row (the measured TCP motion to the next sample, as the server would
apply it: position + d, rotation exp(drot) * R in the base frame) and joint_abs row (the next
sample's joints).

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

from pde_contract.client import RobotClient
from pde_contract.episodes import ChunkRecord, EpisodeFile
from pde_contract.messages import ActionChunk, ActionSpace, Observation
from pde_contract.rotations import rotvec_between
from pde_contract.tasks import TaskSpec
from teleop.base import TeleopError, TeleopSource
from teleop.settings import TeleopSettings

# A sample on the robot clock counts for the grid point it is nearest when within this fraction of
# a period before it (sim clocks step by whole periods; the FR3's by milliseconds).
_GRID_TOLERANCE = 0.25


@dataclass(frozen=True)
class TakeStats:
    """How one take went, counted (never timed): what bench/bench_record.py reports."""

    rows_expected: int  # control ticks the take spanned on the robot's clock
    rows_recorded: int  # rows in the episode
    rows_dropped: int  # ticks of the span with no recorded row
    # Commanded takes: rows the server executed during the take (steps_executed), and chunks it
    # preempted (a row replaced before it ran). None for guided takes, which command nothing.
    rows_executed: int | None
    chunks_preempted: int | None
    duration_s: float  # wall clock, for the operator


@dataclass
class Take:
    task: str
    source: str
    episodes: dict[ActionSpace, EpisodeFile]
    stats: TakeStats
    task_success: bool | None  # the simulator's check at the end (None on hardware)


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
            observations, rows, counts = self._guided(source, max_rows, on_row)
        else:
            observations, rows, counts = self._commanded(source, max_rows, on_row)
        ee_rows, joint_rows = rows
        expected = _ticks_between(observations[0], observations[-1], self.period_s)
        stats = TakeStats(
            rows_expected=expected,
            rows_recorded=len(ee_rows),
            rows_dropped=max(0, expected - len(ee_rows)),
            rows_executed=counts[0],
            chunks_preempted=counts[1],
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
                    for obs, row in zip(observations, space_rows, strict=False)
                ],
                seed=seed,
                source=label,
            )
            for space, space_rows in ((ActionSpace.EE_DELTA, ee_rows), (ActionSpace.JOINT_ABS, joint_rows))
        }
        return Take(task.name, label, episodes, stats, observations[-1].task_success)

    # --- commanded: rows through the safety path -------------------------------------------------

    def _commanded(
        self, source: TeleopSource, max_rows: int, on_row: Callable[[int], None] | None
    ) -> tuple[list[Observation], tuple[list[np.ndarray], list[np.ndarray]], tuple[int | None, int | None]]:
        client = self.client
        before = client.status().counters
        episode_id = f"take-{uuid.uuid4().hex}"
        obs = self._wait_observation(lambda _obs: True, "no observation")
        source.start_take(float(obs.state.gripper_width_m))
        observations = [obs]
        ee_rows: list[np.ndarray] = []
        joint_rows: list[np.ndarray] = []
        for seq in range(max_rows):
            cmd = source.read(self.period_s)
            if cmd.end:
                break
            row = cmd.ee_delta_row().astype(np.float32)  # float32 on the wire and on disk
            chunk = ActionChunk(
                seq=seq,
                episode_id=episode_id,
                action_space=ActionSpace.EE_DELTA,
                actions=row[None],
                control_rate_hz=self.control_rate_hz,
                sent_time_s=time.time(),
            )
            client.submit_chunk(chunk)
            accepted_at_s = client.last_reply.server_time_s if client.last_reply else 0.0
            obs = self._observation_after_row(seq, accepted_at_s)
            observations.append(obs)
            ee_rows.append(row.astype(np.float64))
            joint_rows.append(np.append(obs.state.joint_positions_rad, row[6]))
            if on_row is not None:
                on_row(seq + 1)
        after = client.status().counters
        if not ee_rows:
            raise TeleopError("the take ended before its first row: nothing recorded")
        counts = (
            after.steps_executed - before.steps_executed,
            after.chunks_preempted - before.chunks_preempted,
        )
        return observations, (ee_rows, joint_rows), counts

    def _observation_after_row(self, seq: int, accepted_at_s: float) -> Observation:
        """The first observation published after the server ran row ``seq`` (its one-row chunk is
        the last accepted and no longer executing)."""
        return self._wait_observation(
            lambda obs: (
                obs.publish_time_s >= accepted_at_s
                and obs.last_chunk_seq == seq
                and obs.executing_chunk_seq == -1
            ),
            f"row {seq} was accepted but no observation showed it executed",
        )

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

    def _guided(
        self, source: TeleopSource, max_rows: int, on_row: Callable[[int], None] | None
    ) -> tuple[list[Observation], tuple[list[np.ndarray], list[np.ndarray]], tuple[int | None, int | None]]:
        client = self.client
        client.set_guiding_mode(True)
        samples: list[Observation] = []
        try:
            first = self._wait_observation(lambda _obs: True, "no observation while guiding")
            source.start_take(float(first.state.gripper_width_m))
            samples.append(first)
            while len(samples) <= max_rows and not source.read(self.period_s).end:
                # the next point of the control-rate grid that starts at the first sample
                tick = _ticks_between(first, samples[-1], self.period_s) + 1

                def on_grid(obs: Observation, tick: int = tick) -> bool:
                    return _ticks_between(first, obs, self.period_s) >= tick

                samples.append(self._wait_observation(on_grid, "no observation while guiding"))
                if on_row is not None:
                    on_row(len(samples) - 1)
        finally:
            client.set_guiding_mode(False)
        if len(samples) < 2:
            raise TeleopError("the take ended before the first tick: nothing recorded")
        ee_rows, joint_rows = [], []
        for a, b in itertools.pairwise(samples):
            sa, sb = a.state, b.state
            d_pos = np.asarray(sb.ee_position_m) - np.asarray(sa.ee_position_m)
            d_rot = rotvec_between(sa.ee_quat_xyzw, sb.ee_quat_xyzw)
            ee_rows.append(np.concatenate([d_pos, d_rot, [sb.gripper_width_m]]))
            joint_rows.append(np.append(sb.joint_positions_rad, sb.gripper_width_m))
        return samples, (ee_rows, joint_rows), (None, None)


def _ticks_between(a: Observation, b: Observation, period_s: float) -> int:
    """Control ticks from ``a`` to ``b`` on the robot's clock."""
    span = (b.state.robot_time_s - a.state.robot_time_s) / period_s
    return max(0, math.floor(span + _GRID_TOLERANCE))
