"""The page's connection to the robot server: the newest frame of each camera for the live view and
the server's status (a background thread), plus e-stop / release on demand.

Two rules the page relies on:
- every frame carries its age, measured on this machine's monotonic clock (time since it arrived,
  plus the capture-to-publish delay the robot server reported on its own clock), so a dead robot
  server shows as a growing age and never as a live picture;
- a command that failed (timed out) is dropped, never delivered later: the command socket is closed
  with linger 0 after a failure, which discards what ZMQ still queued for a server that was down.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from pde_contract.client import RobotClient
from pde_contract.link import ClientCurve
from pde_contract.messages import Observation, RobotFault, Status

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class CameraFrame:
    jpeg: bytes
    received_monotonic_s: float  # when this process received it
    capture_delay_s: float  # publish time - capture time, both on the robot server's clock

    def age_s(self, now_monotonic_s: float) -> float:
        return max(0.0, now_monotonic_s - self.received_monotonic_s) + max(0.0, self.capture_delay_s)


@dataclass(frozen=True)
class LiveView:
    frames: dict[str, CameraFrame] = field(default_factory=dict)
    received_monotonic_s: float = 0.0  # 0: no observation yet
    estopped: bool | None = None
    episode_id: str = ""
    task_success: bool | None = None
    ee_position_m: tuple[float, ...] = ()
    gripper_width_m: float | None = None
    # From the robot server's Status: "" when it reports no fault, else what happened and what to do
    # (fault_text). fault_blocking: the arm is stopped until an operator acts or the link is back.
    fault: str = ""
    fault_blocking: bool = False
    guiding: bool = False
    last_error: str = ""
    estop_reason: str = ""
    limits: str = ""  # the workspace box and dynamics factor in force (limits_text)
    # Chunks of the newest episode seen executing (seqs increase, so a new seq is a new chunk); kept
    # between chunks, when the server reports no episode.
    chunk_episode_id: str = ""
    episode_chunks: int = 0
    chunk_seq: int = -1

    @staticmethod
    def from_observation(obs: Observation, received_monotonic_s: float, old: LiveView) -> LiveView:
        chunk_episode, chunks, seq = old.chunk_episode_id, old.episode_chunks, old.chunk_seq
        if obs.episode_id and obs.executing_chunk_seq >= 0:
            if obs.episode_id != chunk_episode:
                chunk_episode, chunks, seq = obs.episode_id, 0, -1
            if obs.executing_chunk_seq > seq:
                chunks, seq = chunks + 1, obs.executing_chunk_seq
        return LiveView(
            frames={
                c.name: CameraFrame(
                    bytes(c.jpeg), received_monotonic_s, obs.publish_time_s - c.capture_time_s
                )
                for c in obs.cameras
            },
            received_monotonic_s=received_monotonic_s,
            estopped=obs.estopped,
            episode_id=obs.episode_id,
            task_success=obs.task_success,
            ee_position_m=tuple(float(x) for x in obs.state.ee_position_m),
            gripper_width_m=float(obs.state.gripper_width_m),
            fault=old.fault,
            fault_blocking=old.fault_blocking,
            guiding=old.guiding,
            last_error=old.last_error,
            estop_reason=old.estop_reason,
            limits=old.limits,
            chunk_episode_id=chunk_episode,
            episode_chunks=chunks,
            chunk_seq=seq,
        )


# Faults after which the arm does not move again by itself (docs/robot-safety.md's fault table);
# the others (a recovered communication error, a refused target) are shown but leave it running.
BLOCKING_FAULTS = frozenset(
    {RobotFault.USER_STOP, RobotFault.REFLEX, RobotFault.RECOVERY_FAILED, RobotFault.CONNECTION_LOST}
)


def fault_text(st: Status) -> str:
    """What the page shows of a Status's fault: "" for none, else kind, detail and the action."""
    if st.fault == RobotFault.NONE:
        return ""
    text = f"{st.fault.value}: {st.fault_detail}" if st.fault_detail else st.fault.value
    return f"{text} — {st.fault_action}" if st.fault_action else text


def limits_text(st: Status) -> str:
    """The limits the operator checks against the cell: "" from a server that does not say."""
    if len(st.workspace_min_m) != 3 or len(st.workspace_max_m) != 3:
        return ""
    bounds = zip("xyz", st.workspace_min_m, st.workspace_max_m, strict=True)
    box = " ".join(f"{axis} {lo:.3f}…{hi:.3f}" for axis, lo, hi in bounds)
    factor = st.relative_dynamics_factor
    factor_text = "" if factor is None else f" · dynamics factor {factor:g}"
    return f"box {box} m{factor_text}"


def fault_blocks_motion(st: Status) -> bool:
    return st.fault in BLOCKING_FAULTS


def observation_age_s(view: LiveView, now_monotonic_s: float | None = None) -> float | None:
    """Seconds since the newest observation arrived; None before the first one."""
    if not view.received_monotonic_s:
        return None
    now = time.monotonic() if now_monotonic_s is None else now_monotonic_s
    return max(0.0, now - view.received_monotonic_s)


class RobotLink:
    def __init__(
        self,
        cmd_endpoint: str,
        timeout_s: float = 1.0,
        status_period_s: float = 1.0,
        curve: ClientCurve | None = None,
    ) -> None:
        self.cmd_endpoint = cmd_endpoint
        self.timeout_s = timeout_s
        self.status_period_s = status_period_s
        self._view = LiveView()
        self._lock = threading.Lock()
        self._cmd_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error = ""
        self.curve = curve  # CURVE keys when the robot link is authenticated (pde_contract/link.py)
        # The live view and status polls use their own client, so a slow status request never
        # holds an e-stop back (and an e-stop's socket can be thrown away on failure).
        self._watch_client = RobotClient(
            cmd_endpoint, name="operator-ui-view", timeout_s=timeout_s, curve=curve
        )
        self._cmd_client: RobotClient | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._watch, name="ui-live-view", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        next_status_s = 0.0
        while not self._stop.is_set():
            try:
                obs = self._watch_client.latest_observation(timeout_s=1.0)
            except Exception as e:  # server down or restarting: show it, keep trying
                self.error = f"no observation from the robot server at {self.cmd_endpoint}: {e}"
            else:
                self.error = ""
                with self._lock:
                    self._view = LiveView.from_observation(obs, time.monotonic(), self._view)
            if time.monotonic() >= next_status_s:
                next_status_s = time.monotonic() + self.status_period_s
                self._poll_status()

    def _poll_status(self) -> None:
        try:
            st = self._watch_client.status()
        except Exception:  # the observation stream already says the server is unreachable
            return
        with self._lock:
            v = self._view
            self._view = LiveView(
                frames=v.frames,
                received_monotonic_s=v.received_monotonic_s,
                estopped=v.estopped,
                episode_id=v.episode_id,
                task_success=v.task_success,
                ee_position_m=v.ee_position_m,
                gripper_width_m=v.gripper_width_m,
                fault=fault_text(st),
                fault_blocking=fault_blocks_motion(st),
                guiding=st.guiding,
                last_error=st.last_error,
                estop_reason=st.estop_reason,
                limits=limits_text(st),
                chunk_episode_id=v.chunk_episode_id,
                episode_chunks=v.episode_chunks,
                chunk_seq=v.chunk_seq,
            )

    def view(self) -> LiveView:
        with self._lock:
            return self._view

    def _command(self, fn: Callable[[RobotClient], T]) -> T:
        """One command with a deadline of ``timeout_s``; on failure its socket is discarded, so the
        request can never reach a server that comes back later, and the deadline travels with it
        (on the server's clock), so a server whose command thread was stuck past it does nothing."""
        with self._cmd_lock:
            if self._cmd_client is None:
                self._cmd_client = RobotClient(
                    self.cmd_endpoint,
                    name="operator-ui",
                    timeout_s=self.timeout_s,
                    curve=self.curve,
                    expire_unanswered=True,
                )
                # The view client's replies already show the server's clock: a command sent before
                # this client has had a reply of its own still carries its deadline.
                self._cmd_client.server_clock = copy.copy(self._watch_client.server_clock)
            client = self._cmd_client
            try:
                return fn(client)
            except Exception:
                self._cmd_client = None
                client.close()  # linger 0: what is still queued is dropped here
                raise

    def estop(self, reason: str) -> None:
        self._command(lambda c: c.estop(reason))
        # Acknowledged: the latch is set now, not at the next observation, so that a Start pressed
        # in between is refused (routers/loop.py reads this view).
        with self._lock:
            self._view = replace(self._view, estopped=True)

    def release_estop(self) -> None:
        self._command(lambda c: c.release_estop())

    def status(self) -> Status:
        return self._command(lambda c: c.status())

    def home(
        self, task: str, seed: int | None, reset_joints_rad: tuple[float, ...] | None, timeout_s: float
    ) -> None:
        """Reset the arm (home, or the task's reset pose; a simulator re-lays ``task``'s scene for
        ``seed``), blocking until it is there. On a client of its own: the motion takes seconds and
        must never hold back an e-stop (the server serves the e-stop during a reset)."""
        with RobotClient(
            self.cmd_endpoint,
            name="operator-ui-home",
            timeout_s=self.timeout_s,
            curve=self.curve,
            expire_unanswered=True,
        ) as client:
            client.server_clock = copy.copy(self._watch_client.server_clock)
            client.connect()
            client.reset(task, seed, timeout_s, reset_joints_rad=reset_joints_rad)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(3.0)
        self._watch_client.close()
        with self._cmd_lock:
            if self._cmd_client is not None:
                self._cmd_client.close()
                self._cmd_client = None
