"""The Robot boundary. The server's control loop calls ``command()`` once per control tick with a
target that the safety layer already checked; backends never see raw client input."""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pde_contract.messages import RobotFault, RobotState


class RobotError(RuntimeError):
    """The backend failed (network, reflex, simulator). The message says what to do."""


class RobotNotConnectedError(RobotError, ConnectionError):
    pass


@dataclass(frozen=True, slots=True)
class RobotTarget:
    """One control tick's absolute target. Exactly one of the pose or the joints is set."""

    gripper_width_m: float
    ee_position_m: np.ndarray | None = None  # [3] base frame
    ee_quat_xyzw: np.ndarray | None = None  # [4]
    joint_positions_rad: np.ndarray | None = None  # [7]
    # The width is the one held since a stop, not a new request: a backend that stopped its
    # gripper on hold() need not move it there again (a chunk row or GripperCommand is False).
    gripper_hold: bool = False
    # The target of the next tick where the executor knows it (the chunk's next row), of the same
    # kind. None: nothing is known to follow (a chunk's last row, a hold), so a backend that feeds
    # velocity forward must bring the arm to rest at this target, not carry it past.
    next_target: RobotTarget | None = None


@dataclass(frozen=True, slots=True)
class FaultReport:
    """A backend fault as the server reports it in ``Status``."""

    kind: RobotFault
    detail: str  # what happened
    # What an operator must do before motion resumes; "" when the backend recovers by itself.
    action: str = ""
    time_s: float = field(default_factory=time.monotonic)

    @property
    def latched(self) -> bool:
        """Motion stays refused until the operator acts and resets (home)."""
        return bool(self.action)


class Robot(abc.ABC):
    """An FR3-like arm with a parallel gripper."""

    name: str = "robot"

    @abc.abstractmethod
    def connect(self) -> None: ...

    @abc.abstractmethod
    def disconnect(self) -> None: ...

    @property
    @abc.abstractmethod
    def is_connected(self) -> bool: ...

    @abc.abstractmethod
    def read_state(self) -> RobotState: ...

    @abc.abstractmethod
    def command(self, target: RobotTarget, period_s: float) -> None:
        """Track ``target`` over the next ``period_s``. Must not block longer than one period
        (a simulator advances its physics by ``period_s`` here)."""

    @abc.abstractmethod
    def hold(self) -> None:
        """Stop any motion and hold the current pose."""

    @abc.abstractmethod
    def home(
        self, task: str = "", seed: int | None = None, joints_rad: Sequence[float] | None = None
    ) -> None:
        """Blocking move to the home pose, or to ``joints_rad`` (a task's own reset pose, q1..q7
        rad, checked by the server), gripper open. A simulator also re-lays its scene for ``task``
        from ``seed``; on hardware the operator resets the scene."""

    @property
    def relative_dynamics_factor(self) -> float | None:
        """The factor on the arm's velocity/acceleration/jerk limits, where the backend has one."""
        return None

    def task_success(self) -> bool | None:
        """The current task's success check, where the backend can judge it (simulator only)."""
        return None

    def idle(self, period_s: float) -> None:
        """A control tick with no target (guiding, a latched fault). A simulator advances its
        physics by ``period_s``; hardware has nothing to do."""
        return None

    def fault(self) -> FaultReport | None:
        """The backend's current or most recent fault (None: none). A latched one refuses motion
        until ``home()``; the executor then drops chunks and stops commanding targets."""
        return None

    def set_guiding(self, enabled: bool) -> None:
        """Stop commanding the arm so an operator can move it by hand (``enabled``), or end that.
        The executor calls it with no chunk running and sends no targets while guiding."""
        raise RobotError(f"the {self.name} backend has no guiding mode")

    def __enter__(self) -> Robot:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()
