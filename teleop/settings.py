"""The one home of teleoperation and recording settings: ``PDE_TELEOP_<FIELD>`` variables,
overridden by ``pde record`` flags. Speeds are what a full deflection (SpaceMouse) or one key press
per tick (keyboard) asks for; the robot server's safety limits still clip every row."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pde_contract.settings import DEFAULT_ROBOT_CMD_ENDPOINT, DataLayout, data_dir_field

# The Franka Hand's widest opening; the server clips to its own limits anyway.
DEFAULT_GRIPPER_OPEN_M = 0.08


class TeleopSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PDE_TELEOP_", extra="ignore", populate_by_name=True)

    cmd_endpoint: str = DEFAULT_ROBOT_CMD_ENDPOINT
    """The robot server's command socket."""
    data_dir: Path = data_dir_field("PDE_TELEOP_")
    demos_dir: str = ""
    """Where `pde record` writes takes (teleop/takes.py). Empty: <data_dir>/demos (DataLayout),
    where `pde learner sft` reads."""
    person: Literal["none", "spacemouse", "page"] = "none"
    """Who may take over from the policy during `pde learner run` (learner/loop/takeover.py):
    ``spacemouse`` (moving the cap past its deadband takes over, as does the page's "take control"
    button), ``page`` (the page's "take control" button, then its keys and gamepad drive:
    teleop/page.py), or ``none`` (no takeovers; the page hides the button)."""
    max_speed_m_s: float = Field(default=0.10, gt=0, le=0.5)
    """TCP speed at full deflection of the SpaceMouse or a gamepad stick, and while a page key is
    held."""
    max_rotation_rad_s: float = Field(default=0.6, gt=0, le=3.0)
    """TCP angular speed at full deflection (SpaceMouse, gamepad) or a held page key."""
    deadband: float = Field(default=0.10, ge=0, lt=1)
    """Deflections below this fraction of full scale count as zero (SpaceMouse, gamepad sticks);
    above it they are rescaled to start from zero, so the arm never jumps when a hand leaves the
    cap or stick."""
    spacemouse_full_scale: float = Field(default=350.0, gt=0)
    """Raw HID axis value of a full deflection (3Dconnexion devices report about +-350)."""
    spacemouse_axis_order: tuple[int, int, int, int, int, int] = (0, 1, 2, 3, 4, 5)
    """Robot base axis i (x, y, z, rx, ry, rz) takes the device's axis ``order[i]`` (HID report
    order: x, y, z, rx, ry, rz). Identity: the device's frame is the base frame."""
    spacemouse_axis_signs: tuple[float, float, float, float, float, float] = (1, -1, -1, -1, -1, 1)
    """Sign per robot axis after the reordering. The default: pyspacemouse's signs for a
    SpaceNavigator. Set order and signs so that pushing the cap away from you moves the TCP away
    from you in your cell (docs/teleop.md), and check each axis slowly before recording."""
    spacemouse_gripper_button: int = Field(default=0, ge=0, le=31)
    """Button that toggles the gripper (open/closed)."""
    spacemouse_end_button: int = Field(default=1, ge=0, le=31)
    """Button that ends the take."""
    keyboard_step_m: float = Field(default=0.01, gt=0, le=0.05)
    """TCP translation per key press (one control tick)."""
    keyboard_step_rad: float = Field(default=0.05, gt=0, le=0.3)
    """TCP rotation per key press (one control tick)."""
    page_send_period_ms: int = Field(default=50, ge=10, le=500)
    """How often the operator page sends its keys' and gamepad's state while it holds control."""
    page_watchdog_ms: int = Field(default=300, ge=50, le=2000)
    """No command from the page for this long (a closed tab, a lost network): zero motion, until
    the next command. At least twice ``page_send_period_ms``."""
    gripper_open_m: float = Field(default=DEFAULT_GRIPPER_OPEN_M, gt=0, le=DEFAULT_GRIPPER_OPEN_M)
    """Width the gripper opens to when toggled open."""
    gripper_closed_m: float = Field(default=0.0, ge=0)
    """Width commanded when toggled closed (0: close on whatever is between the fingers)."""
    max_take_s: float = Field(default=120.0, gt=0)
    """A take ends by itself after this long (the operator normally ends it first)."""
    record_hold_ticks: int = Field(default=2, ge=0, le=3)
    """A commanded take's row goes to the server with this many copies of itself after it: when
    the recorder's next row comes late (a stalled machine), the arm keeps the person's last
    command for those ticks instead of standing still, and each is recorded with the row that ran
    (counted as repeated). 0: a late row leaves its tick without a row (counted dropped). The
    copies never outlast this many ticks (nor the server's watchdog, heartbeat_timeout_s), and the
    next row replaces those not yet run. 2 at 10 Hz: stalls up to 200 ms lose no tick (with 1, one
    tick of 609 went without a row at a load average of 13 on 2 cores; docs/teleop.md)."""
    record_read_margin_s: float | None = Field(default=0.04, ge=0)
    """With record_hold_ticks: a commanded take reads the source this long before the next tick
    is due (the time a row needs to reach the server), not right after the previous row ran, so a
    row carries the device's state of that tick rather than of the one before. None: read at once
    (about a tick more from the device to the arm for a source read once a tick, fewer repeated
    rows on a loaded machine). A ``rereadable`` source (the SpaceMouse) is followed the whole tick
    besides: a changed row is sent at once and runs at the next tick (teleop.held.Following)."""
    observation_timeout_s: float = Field(default=2.0, gt=0)
    """How long the recorder waits for the observation showing its row was executed."""

    @property
    def demos(self) -> Path:
        return Path(self.demos_dir) if self.demos_dir else DataLayout(self.data_dir).demos

    @field_validator("spacemouse_axis_order")
    @classmethod
    def _a_permutation(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if sorted(v) != list(range(6)):
            raise ValueError(f"spacemouse_axis_order {v} must name each of the axes 0..5 once")
        return v

    @field_validator("page_watchdog_ms")
    @classmethod
    def _watchdog_past_two_sends(cls, v: int, info: object) -> int:
        period = getattr(info, "data", {}).get("page_send_period_ms", 50)
        if v < 2 * period:
            raise ValueError(
                f"page_watchdog_ms {v} must be at least twice page_send_period_ms {period}: one late "
                "command would stop the arm"
            )
        return v

    @field_validator("gripper_closed_m")
    @classmethod
    def _closed_below_open(cls, v: float, info: object) -> float:
        opened = getattr(info, "data", {}).get("gripper_open_m", DEFAULT_GRIPPER_OPEN_M)
        if v >= opened:
            raise ValueError(f"gripper_closed_m {v} must be below gripper_open_m {opened}")
        return v
