"""The chunk executor: one control thread that owns the Robot. Every call into the backend
(command, hold, home, read_state) happens on that thread; other threads only change what it will
do next, under a lock, and wake it.

Per tick the thread commands the next row of the executing chunk, or the held target when there is
none (the arm holds when a chunk runs out). A newer chunk replaces the rest of the older one at the
next tick, starting with its row meant for that tick (``ActionChunk.first_row_tick``: the rows meant
for ticks that ran while it was inferred are skipped, pde_contract.seam). The watchdog drops the
chunk and holds when its client has been silent for ``heartbeat_timeout_s``; the e-stop holds and
latches. While the e-stop is latched, the backend reports a latched fault (user stop, reflex:
``Robot.fault()``) or guiding mode is on, the thread stands down: chunks are refused and no target
is sent -- arm or gripper -- (the arm stays where it stopped, or where the operator moves it) until
the e-stop's release, a reset (the operator's acknowledgement of a fault) or the end of guiding.
With fast pacing (the sim) the world moves only with chunk rows (``ExecutorConfig.realtime``): idle
ticks publish and watch as ever but command nothing, so an episode does not depend on how long the
policy took to infer its chunks.
The e-stop is kept on disk (``ExecutorConfig.estop_state_file``, robot_server/latch_file.py) before
``estop()`` returns, and restored when an executor is built on the same file: a restart of the
server, a kill -9 included, does not release it.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgspec
import numpy as np

from pde_contract.messages import (
    ActionChunk,
    ActionSpace,
    ChunkAccepted,
    Counters,
    ErrorCode,
    RobotState,
)
from pde_contract.seam import SeamError, rows_in_the_past
from robot_server.latch_file import LatchFile, LatchFileError, LatchRecord
from robot_server.robots.base import FaultReport, Robot, RobotTarget
from robot_server.safety import (
    PlanStart,
    SafetyError,
    SafetyLimits,
    check_chunk,
    check_gripper_width,
    plan_chunk,
)

log = logging.getLogger(__name__)

# A held pose further than this outside the workspace box is reported (Status.last_error).
_HOLD_OUTSIDE_TOLERANCE_M = 0.01


@dataclass(frozen=True)
class ExecutorConfig:
    control_rate_hz: float = 10.0
    # False (fast pacing, the sim): chunk rows run back to back, and an idle tick (no chunk) still
    # runs at the control rate -- observations, watchdog, stop, reset -- but commands nothing, so
    # simulated time stands still while the policy infers: how long that took (the machine's load)
    # cannot change an episode. Only a GripperCommand moves the world outside a chunk (its width is
    # reached over idle ticks until the next chunk or reset). Stand-down ticks (e-stop, fault,
    # guiding) advance the world either way.
    realtime: bool = True
    heartbeat_timeout_s: float = 0.2  # <= 0 disables the watchdog
    limits: SafetyLimits = field(default_factory=SafetyLimits)
    action_spaces: tuple[ActionSpace, ...] = (ActionSpace.EE_DELTA, ActionSpace.JOINT_ABS)
    tick_log_size: int = 4096
    reconnect_period_s: float = 1.0
    # > 0: run the control thread under SCHED_FIFO at this priority (needs CAP_SYS_NICE; on the
    # robot PC it keeps tick jitter low under load). Ignored with fast pacing, which never sleeps.
    rt_priority: int = 0
    # Where a latched e-stop is kept across restarts (robot_server/latch_file.py); None: it is not.
    estop_state_file: Path | None = None

    @property
    def period_s(self) -> float:
        return 1.0 / self.control_rate_hz


@dataclass(frozen=True, slots=True)
class TickRecord:
    """One control tick, for jitter and chunk-gap measurements."""

    start_s: float  # time.monotonic() when the tick began
    scheduled_s: float  # when it should have begun (realtime pacing)
    chunk_seq: int  # -1: holding
    row: int
    commanded: bool = True  # False: an idle tick of fast pacing, which moved nothing


@dataclass
class _Running:
    seq: int
    episode_id: str
    targets: list[RobotTarget]
    controller: bytes
    next_row: int = 0


@dataclass
class _ResetRequest:
    task: str
    seed: int | None
    joints_rad: tuple[float, ...] | None  # the task's reset pose (checked); None: the robot's home
    done: threading.Event = field(default_factory=threading.Event)
    error: str = ""
    tick: int = -1  # ticks run when the reset took effect


@dataclass
class _GuidingRequest:
    enabled: bool
    done: threading.Event = field(default_factory=threading.Event)
    error: str = ""


@dataclass(frozen=True)
class ExecutorSnapshot:
    state: RobotState | None
    executing_chunk_seq: int
    episode_id: str
    steps_remaining: int
    last_chunk_seq: int
    estopped: bool
    estop_reason: str
    resetting: bool
    task: str
    task_success: bool | None
    connected: bool
    last_error: str
    counters: Counters
    fault: FaultReport | None = None
    guiding: bool = False
    tick: int = 0  # ticks run when ``state`` was read (Observation.tick)


def target_from_state(state: RobotState, gripper_width_m: float, like: RobotTarget | None) -> RobotTarget:
    """Hold where the arm is, in the same kind of target as ``like`` (pose by default)."""
    if like is not None and like.joint_positions_rad is not None:
        return RobotTarget(
            gripper_width_m=gripper_width_m,
            joint_positions_rad=state.joint_positions_rad.copy(),
            gripper_hold=True,
        )
    return RobotTarget(
        gripper_width_m=gripper_width_m,
        ee_position_m=state.ee_position_m.copy(),
        ee_quat_xyzw=state.ee_quat_xyzw.copy(),
        gripper_hold=True,
    )


class ChunkExecutor:
    def __init__(
        self,
        robot: Robot,
        config: ExecutorConfig,
        on_tick: Callable[[RobotState], None] | None = None,
    ) -> None:
        self.robot = robot
        self.config = config
        self._on_tick = on_tick
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self.counters = Counters()
        self.tick_log: collections.deque[TickRecord] = collections.deque(maxlen=max(1, config.tick_log_size))
        self._chunk: _Running | None = None
        # The last chunk accepted, running or not any more: its next_row is how many of its rows
        # ran (ChunkAccepted.previous_rows_run of the next chunk of its episode).
        self._last_accepted: _Running | None = None
        self._held: RobotTarget | None = None
        self._last_target: RobotTarget | None = None
        self._state: RobotState | None = None
        self._hold_requested = False
        # Fast pacing: idle ticks command the held target (a GripperCommand's width) until the next
        # chunk or reset; otherwise they command nothing.
        self._idle_moves = False
        self._estopped = False
        self._estop_reason = ""
        self._estop_generation = 0  # e-stops latched: a release never clears a newer one
        self._estop_file_lock = threading.Lock()  # orders the file's writes and removals
        self._estop_file = LatchFile(
            config.estop_state_file,
            "release the e-stop (ReleaseEStop: the page's Release button, or RobotClient.release_estop())",
        )
        self._reset: _ResetRequest | None = None
        self._last_seq = -1
        self._last_episode: str | None = None
        self._last_seen: dict[bytes, float] = {}
        self._task = ""
        self._task_success: bool | None = None
        self._last_error = ""
        self._connected = False
        self._progress: tuple[int, str, int] = (-1, "", 0)  # chunk seq, episode, rows left
        self._fault: FaultReport | None = None  # the backend's, read by the control thread
        self._guiding = False
        self._guiding_req: _GuidingRequest | None = None
        # Control ticks begun (the index of the next one), and how many had run when _state was
        # read: the clock that chunks' first_row_tick is measured on.
        self._ticks = 0
        self._state_tick = 0
        self._restore_estop()

    def _restore_estop(self) -> None:
        """An e-stop latched before a restart (or an unreadable latch file) latches this executor
        too, before anything can move."""
        record = self._estop_file.load()
        if record is None:
            return
        self._estopped = True
        if record.latched_at:
            self._estop_reason = (
                f"{record.detail} (latched {record.latched_at}, before the robot server restarted)"
            )
        else:
            self._estop_reason = f"{record.detail} {record.action}"
        self._last_error = f"e-stop restored from {self._estop_file.path}: {self._estop_reason}"
        log.error("%s", self._last_error)

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        if not self.robot.is_connected:
            self.robot.connect()
        state = self.robot.read_state()
        with self._lock:
            self._state = state
            self._connected = True
            self._held = self._checked_hold(state, state.gripper_width_m, None)
            self._last_target = self._held
        self._thread = threading.Thread(target=self._run, name="control-loop", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        self._closing.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        try:
            if self.robot.is_connected:
                self.robot.hold()
                self.robot.disconnect()
        except Exception as e:  # closing: report, never raise
            log.warning("robot disconnect failed: %s", e)

    # --- commands (any thread) ------------------------------------------------------------------

    def note_activity(self, client_id: bytes) -> None:
        with self._lock:
            self._last_seen[client_id] = time.monotonic()

    def submit(self, chunk: ActionChunk, client_id: bytes) -> tuple[ChunkAccepted, list[str]]:
        """Validate and plan ``chunk``; it starts at the next tick, preempting the running one."""
        cfg = self.config
        with self._lock:
            self.counters.chunks_received += 1
            try:
                if self._estopped:
                    raise SafetyError(
                        ErrorCode.ESTOPPED,
                        f"e-stop is latched ({self._estop_reason or 'no reason given'}): "
                        "check the cell, then call release_estop() before sending motion",
                    )
                if self._reset is not None:
                    raise SafetyError(ErrorCode.BUSY, "a reset is in progress: send chunks after it returns")
                self._refuse_motion_while_standing_down()
                actions = check_chunk(chunk, cfg.control_rate_hz, list(cfg.action_spaces), cfg.limits)
                if chunk.episode_id == self._last_episode and chunk.seq <= self._last_seq:
                    raise SafetyError(
                        ErrorCode.STALE,
                        f"chunk seq {chunk.seq} is not newer than {self._last_seq} of episode "
                        f"{chunk.episode_id!r}: dropped (seq must increase within an episode)",
                    )
                start_tick = self._ticks
                try:
                    skipped = rows_in_the_past(chunk.first_row_tick, start_tick, len(actions))
                except SeamError as e:
                    future = chunk.first_row_tick > start_tick
                    raise SafetyError(ErrorCode.INVALID_ACTION if future else ErrorCode.STALE, str(e)) from e
                plan = plan_chunk(
                    actions[skipped:], chunk.action_space, self._plan_start(), cfg.limits, cfg.period_s
                )
            except SafetyError as e:
                if e.code is ErrorCode.STALE:
                    self.counters.chunks_stale += 1
                else:
                    self.counters.chunks_rejected += 1
                raise
            if self._chunk is not None:
                self.counters.chunks_preempted += 1
                if self._chunk.next_row > 0:
                    self.counters.chunks_executed += 1
            previous = self._last_accepted
            previous_rows_run = (
                previous.next_row if previous is not None and previous.episode_id == chunk.episode_id else -1
            )
            self._chunk = self._last_accepted = _Running(chunk.seq, chunk.episode_id, plan.targets, client_id)
            self._idle_moves = False
            self._update_progress()
            self._last_seq, self._last_episode = chunk.seq, chunk.episode_id
            self._last_seen[client_id] = time.monotonic()
            self.counters.steps_clipped += plan.steps_clipped
        if not cfg.realtime:
            self._wake.set()
        return ChunkAccepted(
            seq=chunk.seq,
            steps=len(plan.targets),
            steps_clipped=plan.steps_clipped,
            rows_skipped=skipped,
            start_tick=start_tick,
            previous_rows_run=previous_rows_run,
        ), plan.notes

    def _refuse_motion_while_standing_down(self) -> None:
        # caller holds the lock
        if self._guiding or self._guiding_req is not None:
            raise SafetyError(
                ErrorCode.BUSY,
                "guiding mode is on (the arm is moved by hand): send SetGuidingMode(enabled=False) first",
            )
        fault = self._fault
        if fault is not None and fault.latched:
            raise SafetyError(
                ErrorCode.BACKEND_ERROR,
                f"motion is refused after a {fault.kind.value} fault: {fault.detail} {fault.action}",
            )

    def stop(self) -> int:
        """Drop the chunk and hold. Returns the ticks run when it took effect: the dropped chunk ran
        its rows for the ticks before it, as it would have had a chunk preempted it then."""
        with self._lock:
            self._drop_chunk()
            self._hold_requested = True
            tick = self._ticks
        self._wake.set()
        return tick

    def estop(self, reason: str) -> str:
        """Latch: hold now, then keep the latch on disk (fsynced) before returning, so that an
        acknowledged e-stop survives a restart. Returns "" or why it could not be kept (the latch
        holds in this process all the same)."""
        with self._lock:
            self._drop_chunk()
            if not self._estopped:
                self.counters.estops += 1
            self._estopped = True
            self._estop_reason = reason
            self._estop_generation += 1
            self._hold_requested = True
        self._wake.set()
        try:
            with self._estop_file_lock:
                self._estop_file.save(
                    LatchRecord("estop", reason, "Check the cell, then " + self._estop_file.release + ".")
                )
        except LatchFileError as e:
            log.error("%s", e)
            with self._lock:
                self._last_error = str(e)
            return str(e)
        return ""

    def release_estop(self) -> None:
        """The operator's explicit release; the file goes first (a latch whose file stays would
        come back at a restart: then it stays latched here too, and the error says what to do)."""
        with self._lock:
            generation = self._estop_generation
        # File I/O outside the control thread's lock; an e-stop pressed meanwhile stays latched.
        with self._estop_file_lock:
            try:
                self._estop_file.clear()
            except LatchFileError as e:
                raise SafetyError(ErrorCode.BACKEND_ERROR, str(e)) from e
            with self._lock:
                if self._estop_generation == generation:
                    self._estopped = False
                    self._estop_reason = ""

    def gripper(self, width_m: float) -> None:
        with self._lock:
            if self._estopped:
                raise SafetyError(ErrorCode.ESTOPPED, "e-stop is latched: call release_estop() first")
            if self._chunk is not None:
                raise SafetyError(
                    ErrorCode.BUSY,
                    "a chunk is executing and its last column sets the gripper: stop() first, or put "
                    "the width in the chunk",
                )
            self._refuse_motion_while_standing_down()
            width = check_gripper_width(width_m, self.config.limits)
            assert self._held is not None
            self._held = replace(self._held, gripper_width_m=width, gripper_hold=False)
            self._idle_moves = True  # fast pacing too: the client asked for motion outside a chunk

    def reset(
        self, task: str, seed: int | None, timeout_s: float, joints_rad: tuple[float, ...] | None = None
    ) -> int:
        """Blocking: the control thread drops any chunk and moves home, or to ``joints_rad`` (a
        task's reset pose, already checked by safety.check_reset_pose), re-laying a sim scene.
        Returns the ticks run when it took effect: a snapshot with a greater ``tick`` is after it."""
        with self._lock:
            if self._estopped:
                raise SafetyError(ErrorCode.ESTOPPED, "e-stop is latched: call release_estop() before reset")
            if self._reset is not None:
                raise SafetyError(ErrorCode.BUSY, "a reset is already in progress")
            if self._guiding or self._guiding_req is not None:
                raise SafetyError(
                    ErrorCode.BUSY, "guiding mode is on: send SetGuidingMode(enabled=False) before reset"
                )
            self._drop_chunk()
            req = self._reset = _ResetRequest(task, seed, joints_rad)
        self._wake.set()
        if not req.done.wait(timeout_s):
            raise SafetyError(ErrorCode.BACKEND_ERROR, f"reset did not finish within {timeout_s} s")
        if req.error:
            raise SafetyError(ErrorCode.BACKEND_ERROR, f"reset failed: {req.error}")
        return req.tick

    def set_guiding(self, enabled: bool, timeout_s: float) -> None:
        """Blocking: the control thread drops any chunk and hands the arm to the operator (or takes
        it back, holding where it was left)."""
        with self._lock:
            if self._estopped and enabled:
                raise SafetyError(ErrorCode.ESTOPPED, "e-stop is latched: call release_estop() first")
            if self._reset is not None or self._guiding_req is not None:
                raise SafetyError(ErrorCode.BUSY, "a reset or guiding change is in progress")
            self._drop_chunk()
            req = self._guiding_req = _GuidingRequest(enabled)
        self._wake.set()
        if not req.done.wait(timeout_s):
            raise SafetyError(ErrorCode.BACKEND_ERROR, f"guiding mode did not change within {timeout_s} s")
        if req.error:
            raise SafetyError(ErrorCode.BACKEND_ERROR, f"guiding mode not changed: {req.error}")

    def snapshot(self) -> ExecutorSnapshot:
        with self._lock:
            seq, episode, remaining = self._progress
            return ExecutorSnapshot(
                state=self._state,
                executing_chunk_seq=seq,
                episode_id=episode,
                steps_remaining=remaining,
                last_chunk_seq=self._last_seq,
                estopped=self._estopped,
                estop_reason=self._estop_reason,
                resetting=self._reset is not None,
                task=self._task,
                task_success=self._task_success,
                connected=self._connected,
                last_error=self._last_error,
                counters=msgspec.structs.replace(self.counters),
                fault=self._fault,
                guiding=self._guiding,
                tick=self._state_tick,
            )

    def measured_rate_hz(self, window_s: float = 5.0) -> float:
        """Ticks per second over the last ``window_s``, counted from the end of the last pause longer
        than 3 periods (a reset), so it is the loop's rate while it runs."""
        with self._lock:
            starts = [r.start_s for r in self.tick_log]
        now = time.monotonic()
        recent = np.array([s for s in starts if now - s <= window_s])
        if recent.size >= 2:
            pauses = np.nonzero(np.diff(recent) > 3 * self.config.period_s)[0]
            if pauses.size:
                recent = recent[pauses[-1] + 1 :]
        if recent.size < 3:
            return 0.0
        return float((recent.size - 1) / (recent[-1] - recent[0]))

    # --- control thread ---------------------------------------------------------------------------

    def _drop_chunk(self) -> None:
        # caller holds the lock
        if self._chunk is not None and self._chunk.next_row > 0:
            self.counters.chunks_executed += 1
        self._chunk = None
        self._update_progress()

    def _update_progress(self) -> None:
        # caller holds the lock. What observers see of the chunk, kept consistent with _state:
        # during a tick the row pointer moves before the command, the state after it.
        ch = self._chunk
        self._progress = (ch.seq, ch.episode_id, len(ch.targets) - ch.next_row) if ch else (-1, "", 0)

    def _plan_start(self) -> PlanStart:
        # caller holds the lock. Deltas continue from the last commanded target.
        assert self._state is not None and self._last_target is not None
        last, st = self._last_target, self._state
        pose_src = last if last.ee_position_m is not None else None
        return PlanStart(
            ee_position_m=pose_src.ee_position_m if pose_src else st.ee_position_m,  # type: ignore[arg-type]
            ee_quat_xyzw=pose_src.ee_quat_xyzw if pose_src else st.ee_quat_xyzw,  # type: ignore[arg-type]
            joint_positions_rad=(
                last.joint_positions_rad if last.joint_positions_rad is not None else st.joint_positions_rad
            ),
            gripper_width_m=last.gripper_width_m,
        )

    def _checked_hold(self, state: RobotState, width_m: float, like: RobotTarget | None) -> RobotTarget:
        """Hold where the arm is (caller holds the lock), and say so when that is outside the
        workspace box: a hold never moves the arm, and a chunk planned from there moves it back in
        by at most the per-tick step."""
        limits = self.config.limits
        p = np.asarray(state.ee_position_m, dtype=np.float64)
        lo, hi = np.asarray(limits.workspace_min_m), np.asarray(limits.workspace_max_m)
        outside_m = float(np.linalg.norm(np.maximum(lo - p, 0.0) + np.maximum(p - hi, 0.0)))
        if not np.all(np.isfinite(p)) or outside_m > _HOLD_OUTSIDE_TOLERANCE_M:
            self._last_error = (
                f"holding at a measured TCP {np.round(p, 4).tolist()} that is {outside_m * 1000:.0f} mm "
                f"outside the workspace box {limits.workspace_min_m}-{limits.workspace_max_m}: chunks "
                f"bring it back in at most {limits.max_step_translation_m} m per tick; check the arm"
            )
            log.warning(self._last_error)
        return target_from_state(state, width_m, like)

    def _watchdog_deadline(self) -> float:
        # caller holds the lock
        t = self.config.heartbeat_timeout_s
        if t <= 0 or self._chunk is None:
            return math.inf
        return self._last_seen.get(self._chunk.controller, 0.0) + t

    def _trip_watchdog(self) -> None:
        # caller holds the lock
        self._drop_chunk()
        self._hold_requested = True
        self.counters.watchdog_trips += 1
        self._last_error = (
            f"watchdog: no heartbeat or command from the controlling client for "
            f"{self.config.heartbeat_timeout_s * 1000:.0f} ms; chunk dropped, arm held"
        )
        log.warning(self._last_error)

    def _wait_for_tick(self, next_t: float) -> None:
        """Sleep until ``next_t``, waking early to trip the watchdog or to act on a stop/e-stop."""
        while not self._closing.is_set():
            now = time.monotonic()
            with self._lock:
                deadline = self._watchdog_deadline()
                if now >= deadline:
                    self._trip_watchdog()
                    deadline = math.inf
                urgent = self._hold_requested or self._reset is not None or self._guiding_req is not None
                running_fast = not self.config.realtime and self._chunk is not None
            if urgent:
                self._do_hold_if_requested()
                with self._lock:
                    if self._reset is not None or self._guiding_req is not None:
                        return
            if now >= next_t or running_fast:
                return
            self._wake.wait(min(next_t, deadline) - now)
            self._wake.clear()

    def _do_hold_if_requested(self) -> None:
        with self._lock:
            if not self._hold_requested:
                return
            self._hold_requested = False
            held = self._held
        try:
            self.robot.hold()
            state = self.robot.read_state()
        except Exception as e:
            self._backend_failed(e, hold=False)
            with self._lock:
                # Cannot hold where the arm is: stop commanding until a reconnect re-reads the state.
                self._connected = False
            return
        with self._lock:
            # The width last commanded, not the one held before a dropped chunk: a stop must not
            # open a gripper that the chunk closed on an object.
            like = self._last_target or held
            width = like.gripper_width_m if like else state.gripper_width_m
            self._held = self._checked_hold(state, width, self._last_target)
            self._last_target = self._held
            self._state, self._state_tick = state, self._ticks

    def _do_reset(self, req: _ResetRequest) -> None:
        try:
            self.robot.home(task=req.task, seed=req.seed, joints_rad=req.joints_rad)
            state = self.robot.read_state()
            success = self.robot.task_success()
        except Exception as e:
            self._backend_failed(e)
            req.error = str(e) or type(e).__name__
        else:
            with self._lock:
                self._state, self._state_tick = state, self._ticks
                req.tick = self._ticks
                self._held = self._checked_hold(state, state.gripper_width_m, None)
                self._last_target = self._held
                self._task = req.task
                self._task_success = success
                self._last_seq, self._last_episode = -1, None
                self._last_accepted = None
                self._idle_moves = False
        with self._lock:
            self._reset = None
        req.done.set()

    def _do_guiding(self, req: _GuidingRequest) -> None:
        try:
            self.robot.set_guiding(req.enabled)
            state = self.robot.read_state()
        except Exception as e:
            req.error = str(e) or type(e).__name__
            log.warning("guiding mode change failed: %s", req.error)
        else:
            with self._lock:
                self._guiding = req.enabled
                self._state, self._state_tick = state, self._ticks
                width = self._held.gripper_width_m if self._held else state.gripper_width_m
                self._held = self._checked_hold(state, width, None)
                self._last_target = self._held
        with self._lock:
            self._guiding_req = None
        req.done.set()

    def _stand_down_tick(self, period_s: float) -> None:
        """A tick that sends no target (guiding, latched fault): a simulator still advances; the
        held target follows the measured pose, so nothing jumps when motion resumes."""
        with self._lock:
            self._ticks += 1  # time passes for first_row_tick, the arm commanded or not
            tick = self._ticks
        try:
            self.robot.idle(period_s)
            state = self.robot.read_state()
        except Exception as e:
            self._backend_failed(e, hold=False)
            return
        with self._lock:
            self._state, self._state_tick = state, tick
            width = self._held.gripper_width_m if self._held else state.gripper_width_m
            self._held = target_from_state(state, width, None)
            self._last_target = self._held
            self._update_progress()
        self._notify_tick(state)

    def _notify_tick(self, state: RobotState) -> None:
        if self._on_tick is not None:
            try:
                self._on_tick(state)
            except Exception:
                log.exception("on_tick callback failed")

    def _read_fault(self) -> bool:
        """Read the backend's fault; True when the thread must stand down this tick."""
        try:
            fault = self.robot.fault()
        except Exception as e:  # a broken fault report must not stop the loop
            log.warning("reading the backend's fault failed: %s", e)
            fault = None
        with self._lock:
            self._fault = fault
            stand_down = self._guiding or (fault is not None and fault.latched)
            if stand_down and self._chunk is not None:
                self._drop_chunk()
                if fault is not None and fault.latched:
                    self._last_error = f"{fault.kind.value}: {fault.detail} {fault.action}"
        return stand_down

    def _backend_failed(self, e: BaseException, hold: bool = True) -> None:
        log.error("backend error: %s", e)
        with self._lock:
            self.counters.backend_errors += 1
            self._last_error = f"backend error: {e}"
            self._drop_chunk()
            self._connected = self.robot.is_connected
            # Hold where the arm is now: the held target may be from before the dropped chunk.
            if hold and self._connected:
                self._hold_requested = True

    def _try_reconnect(self) -> None:
        try:
            self.robot.connect()
            state = self.robot.read_state()
        except Exception as e:
            log.warning("reconnect failed: %s", e)
            return
        with self._lock:
            self.counters.backend_recoveries += 1
            self._connected = True
            self._state, self._state_tick = state, self._ticks
            self._held = self._checked_hold(state, state.gripper_width_m, None)
            self._last_target = self._held

    def _raise_priority(self) -> None:
        prio = self.config.rt_priority
        if prio <= 0 or not self.config.realtime:
            return
        try:
            os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO, os.sched_param(prio))
        except (OSError, AttributeError) as e:
            log.warning("control thread stays at normal priority (SCHED_FIFO %d refused: %s)", prio, e)

    def _run(self) -> None:
        self._raise_priority()
        cfg = self.config
        period = cfg.period_s
        next_t = time.monotonic()
        last_reconnect = 0.0
        while not self._closing.is_set():
            self._wait_for_tick(next_t)
            if self._closing.is_set():
                break
            start = time.monotonic()
            with self._lock:
                reset = self._reset
            if reset is not None:
                self._do_reset(reset)
                next_t = time.monotonic()
                continue
            with self._lock:
                guiding_req = self._guiding_req
            if guiding_req is not None:
                self._do_guiding(guiding_req)
                next_t = time.monotonic()
                continue
            stand_down = self._read_fault()  # also while disconnected: Status shows why
            with self._lock:
                # an e-stop stands down after its hold: nothing moves, arm or gripper, until released
                stand_down = stand_down or self._estopped
            if not self._connected:
                if start - last_reconnect >= cfg.reconnect_period_s:
                    last_reconnect = start
                    self._try_reconnect()
                next_t = start + period
                continue
            if stand_down:
                self._stand_down_tick(period)
                next_t = max(next_t + period, time.monotonic() - period)
                continue
            with self._lock:
                ch = self._chunk
                if ch is not None and not self._estopped:
                    target = ch.targets[ch.next_row]
                    seq, row = ch.seq, ch.next_row
                    ch.next_row += 1
                    self.counters.steps_executed += 1
                    if ch.next_row < len(ch.targets):
                        # the backend may carry the arm's speed through this target toward the next
                        target = replace(target, next_target=ch.targets[ch.next_row])
                    else:
                        self._chunk = None
                        self.counters.chunks_executed += 1
                        self._held = target
                else:
                    assert self._held is not None
                    target, seq, row = self._held, -1, -1
                # Fast pacing: simulated time passes only with rows (and a GripperCommand's motion).
                commanded = cfg.realtime or seq >= 0 or self._idle_moves
                self._last_target = target
                self.tick_log.append(TickRecord(start, next_t, seq, row, commanded))
                self._ticks += 1
                tick = self._ticks
            try:
                if commanded:
                    self.robot.command(target, period)
                state = self.robot.read_state()
                success = self.robot.task_success()
            except Exception as e:
                self._backend_failed(e)
            else:
                with self._lock:
                    self._state, self._state_tick = state, tick
                    self._task_success = success
                    self._update_progress()
                self._notify_tick(state)
            now = time.monotonic()
            if not cfg.realtime and seq >= 0:
                next_t = now + period  # fast pacing: idle ticks resume at the rate from here
            else:
                next_t += period
                if now - next_t > period:
                    with self._lock:
                        self.counters.tick_overruns += 1
                    next_t = now
