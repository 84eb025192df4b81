"""The teleoperation boundary: one ABC for every way an operator demonstrates a task.

A source is read once per control tick (``read(period_s)``, never blocking: the device's state
as of now) and answers a ``TeleopCommand``: the TCP motion for that tick, the gripper width, and
whether the operator ended the take. During RL, ``wants_control`` says whether the operator asks to
take over from the policy; the actor (``learner/episode/person.py``) then runs the source's rows as a take
until it ends, and hands back to the policy. The recorder (``teleop/recorder.py``) turns commands into
ee_delta rows and sends them to the robot server like any other chunk, so every row passes its
safety layer. A ``guided`` source commands nothing: the arm is in guiding mode, the operator moves
it by hand, and the recorder samples the measured pose instead (its commands carry only ``end``).

Implementations, side by side: ``spacemouse.SpaceMouseSource`` (a HID device; tests fake the
device only), ``keyboard.KeyboardSource`` (key presses from a terminal, or scripted),
``page.PageSource`` (the operator page's keys and gamepad), ``guiding.HandGuidingSource`` and
``scripted.ScriptedSource`` (rows from a script: tests, bench).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import numpy as np

from pde_contract.messages import ACTION_DIMS, ActionSpace


class TeleopError(RuntimeError):
    """A source or the recorder cannot go on; the message says what was wrong and what to do."""


class TeleopNotConnectedError(TeleopError, ConnectionError):
    pass


def _zeros3() -> np.ndarray:
    return np.zeros(3)


@dataclass(frozen=True, slots=True)
class TeleopCommand:
    """One control tick of an operator's command, in the robot base frame."""

    gripper_width_m: float
    translation_m: np.ndarray = field(default_factory=_zeros3)  # [3] TCP motion this tick
    rotation_rad: np.ndarray = field(default_factory=_zeros3)  # [3] rotation vector this tick
    end: bool = False  # the operator ended the take (this tick's motion is not sent)

    def ee_delta_row(self) -> np.ndarray:
        """The command as one ee_delta row: [dx, dy, dz, drx, dry, drz, gripper_width_m]."""
        row = np.concatenate([self.translation_m, self.rotation_rad, [self.gripper_width_m]])
        assert row.shape == (ACTION_DIMS[ActionSpace.EE_DELTA],)
        return row.astype(np.float64)


class TeleopSource(abc.ABC):
    """Something an operator demonstrates with. ``connect`` before ``read`` (it opens the device,
    ``_open``); context-manager use connects and disconnects."""

    name: str = "teleop"
    # True: the operator moves the arm by hand (guiding mode); the recorder sends no rows and
    # samples the measured pose. False: the source's rows drive the arm.
    guided: bool = False
    # True: ``read`` gives the device's state now and consumes nothing but button presses, which it
    # keeps in its own state (the gripper's toggle) or returns as ``end``: it may be read again at
    # any time, and a changed row sent at once (the recorder follows it the whole tick:
    # ``teleop.held.Following``). False: each read is one tick's (a script's next row, a key
    # press's step).
    rereadable: bool = False
    _connected: bool = False

    def _open(self) -> None:  # noqa: B027  (a source without a device has nothing to open)
        """Open the device."""

    def _close(self) -> None:  # noqa: B027
        """Close the device."""

    def connect(self) -> None:
        if not self._connected:
            self._open()
            self._connected = True

    def disconnect(self) -> None:
        if self._connected:
            self._connected = False
            self._close()

    @property
    def is_connected(self) -> bool:
        return self._connected

    @abc.abstractmethod
    def start_take(self, gripper_width_m: float) -> None:
        """A take begins with the gripper at ``gripper_width_m`` (measured): forget motion and
        button presses from before it."""

    @abc.abstractmethod
    def read(self, period_s: float) -> TeleopCommand:
        """The command for the next control tick of ``period_s`` seconds. Never blocks."""

    def wants_control(self) -> bool:
        """Between takes, while a policy drives: is the operator asking to take over now (a device
        moved past its deadband)? Never blocks. A source without such a gesture answers False and
        is taken over by an explicit request only (the page's button): ``learner.episode.person``."""
        return False

    def _require_connected(self) -> None:
        if not self._connected:
            raise TeleopNotConnectedError(f"the {self.name} source is not connected: call connect() first")

    def __enter__(self) -> TeleopSource:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()


def remove_deadband(deflection: np.ndarray, deadband: float) -> np.ndarray:
    """Deflections in [-1, 1] below ``deadband`` become 0; the rest is rescaled to start from 0
    (so the arm never jumps as a hand leaves the stick or cap)."""
    v = np.clip(np.asarray(deflection, dtype=np.float64), -1.0, 1.0)
    return np.sign(v) * np.maximum(np.abs(v) - deadband, 0.0) / (1.0 - deadband)


class GripperToggle:
    """The gripper as one button works it: each press flips open/closed. A take starts in the state
    the measured width shows (closed when nearer the closed width than the open one)."""

    def __init__(self, open_m: float, closed_m: float) -> None:
        self.open_m, self.closed_m = open_m, closed_m
        self.closed = False

    def start(self, measured_width_m: float) -> None:
        self.closed = abs(measured_width_m - self.closed_m) < abs(measured_width_m - self.open_m)

    def toggle(self) -> None:
        self.closed = not self.closed

    @property
    def width_m(self) -> float:
        return self.closed_m if self.closed else self.open_m
