"""Settings of the FR3 backend (the ``[franka]`` section of the robot configuration file,
overridden by ``PDE_FRANKA_<FIELD>``) and the FR3's own dynamics figures."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from robot_server.config_file import FileSettings
from robot_server.robots.franka.streaming import StrategyName

# FR3 datasheet values (franky's defaults are the Panda's, higher for several of these).
FR3_JOINT_VELOCITY_RAD_S = (2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26)
FR3_JOINT_ACCELERATION_RAD_S2 = (10.0,) * 7
FR3_JOINT_JERK_RAD_S3 = (5000.0,) * 7
FR3_TRANSLATION_VELOCITY_M_S = 3.0
FR3_TRANSLATION_ACCELERATION_M_S2 = 9.0
FR3_TRANSLATION_JERK_M_S3 = 4500.0
FR3_ROTATION_VELOCITY_RAD_S = 2.5
FR3_ROTATION_ACCELERATION_RAD_S2 = 17.0
FR3_ROTATION_JERK_RAD_S3 = 8500.0
# The elbow is joint 3's position: it gets joint 3's limits.
FR3_ELBOW_VELOCITY_RAD_S = 2.62
FR3_ELBOW_ACCELERATION_RAD_S2 = 10.0
FR3_ELBOW_JERK_RAD_S3 = 5000.0
FR3_JOINT_LOWER_RAD = (-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159)
FR3_JOINT_UPPER_RAD = (2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159)
FR3_JOINT_TORQUE_MAX_NM = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)  # what each joint can produce
FR3_GRIPPER_MAX_WIDTH_M = 0.08

FAULT_STATE_NAME = "robot_fault.json"
DEFAULT_HOME_JOINTS_RAD = (0.0, -math.pi / 4, 0.0, -3 * math.pi / 4, 0.0, math.pi / 2, math.pi / 4)


Joints7 = tuple[float, float, float, float, float, float, float]


class FrankaConfig(FileSettings):
    """The FR3 backend. Every field can be set in the file's [franka] section or from the
    environment, e.g. ``PDE_FRANKA_HOST``."""

    model_config = SettingsConfigDict(env_prefix="PDE_FRANKA_", extra="forbid")
    config_section = "franka"
    refused_in_file: ClassVar[dict[str, str]] = {
        "desk_password": "a password never goes into this file: write it to a file readable only by the "
        "server (chmod 600) and name that file with desk_password_file"
    }

    host: str = Field(
        default="172.16.0.2", description="FCI address of the robot (Desk > Settings > Network)"
    )
    realtime: Literal["enforce", "ignore"] = Field(
        default="enforce",
        description="libfranka real-time check. 'ignore' is for franky-sim and dry runs only: on the "
        "real arm it causes communication_constraints_violation reflexes.",
    )
    relative_dynamics_factor: float = Field(
        default=0.3,
        gt=0.0,
        le=1.0,
        description="scales the FR3 velocity/acceleration/jerk limits for all motions",
    )
    home_dynamics_factor: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="the home move's share of relative_dynamics_factor: franky multiplies the two, so "
        "0.1 x 0.5 runs homes at 5 % of the FR3 limits (robots/franka/home.py)",
    )
    streaming: StrategyName = Field(
        default="timed_preempt", description="how per-tick targets become motions (see streaming.py)"
    )
    connect_timeout_s: float = Field(default=3.0, gt=0.0, description="deadline for the FCI handshake")
    stall_timeout_s: float = Field(
        default=2.0, gt=0.0, description="a motion command unanswered this long counts as a lost connection"
    )
    reconnect_interval_s: float = Field(
        default=0.5, gt=0.0, description="pause between reconnection attempts"
    )
    home_timeout_s: float = Field(
        default=30.0,
        gt=0.0,
        description="the longest a home (reset) move may take, in robot time: one whose planned duration "
        "(distance at the home speed) x 1.25 + 1 s exceeds it is refused before it starts, with the numbers",
    )
    # Collision thresholds (libfranka set_collision_behavior): reflex above these. Each must sit
    # below what its joint can produce (FR3_JOINT_TORQUE_MAX_NM: 87 Nm for joints 1-4, 12 Nm for
    # 5-7), or torque-based detection on that joint never fires.
    torque_thresholds_nm: tuple[float, float, float, float, float, float, float] = (
        20.0,
        20.0,
        20.0,
        20.0,
        10.0,
        10.0,
        10.0,
    )
    force_thresholds_n: tuple[float, float, float, float, float, float] = (30.0,) * 6
    # Automatic recovery from reflexes: at most this many within the window, then a hard error.
    max_recoveries: int = Field(default=3, ge=0)
    recovery_window_s: float = Field(default=60.0, gt=0.0)
    home_joints_rad: Joints7 = DEFAULT_HOME_JOINTS_RAD
    # Per-task reset poses live in the tasks file (PDE_TASKS_FILE, reset_joints_rad): the loop
    # sends them with Reset, so a task's pose has one home beside its prompt.
    # The payload beyond the Franka Hand (e.g. a wrist camera and its mount), for libfranka's
    # set_load: without it the arm reads the extra weight as an external force and false collision
    # reflexes follow. Sent at every connect (0 kg clears a load set before: the controller keeps
    # the last one); the hand itself is configured in Desk.
    load_mass_kg: float = Field(default=0.0, ge=0.0, le=3.0)
    load_center_of_mass_m: tuple[float, float, float] = (0.0, 0.0, 0.0)  # in the flange frame
    load_inertia_kg_m2: tuple[float, float, float, float, float, float, float, float, float] = (0.0,) * 9
    gripper: bool = Field(default=True, description="a Franka Hand is mounted")
    gripper_homing: bool = Field(
        default=True,
        description="home the hand at start (it learns its finger width; needed after a finger change)",
    )
    gripper_speed_m_s: float = Field(default=0.1, gt=0.0, le=0.2)
    gripper_force_n: float = Field(default=20.0, gt=0.0, le=70.0)
    gripper_deadband_m: float = Field(
        default=0.005,
        ge=0.0,
        description="width changes smaller than this are not sent (each call takes ~0.5 s)",
    )
    gripper_epsilon_inner_m: float = Field(
        default=0.005, ge=0.0, description="grasp: the fingers may stop this much below the commanded width"
    )
    gripper_epsilon_outer_m: float = Field(
        default=0.07, ge=0.0, description="grasp: ... and this much above it (closing to 0 holds up to 7 cm)"
    )
    gripper_stop_on_hold: bool = Field(
        default=False,
        description="a hold or e-stop also stops a running gripper move/grasp (libfranka stop). Check on "
        "the lab's hand first; never against franky-sim 1.0.4, which does not answer the stopped call",
    )
    gripper_empty_width_m: float = Field(
        default=0.003, ge=0.0, description="fingers closed below this hold nothing (object_held false)"
    )
    # A latched fault (reflex, user stop) is kept here, so it survives a restart of the server
    # until the operator resets (home). None: <PDE_DATA_DIR>/robot_fault.json where PDE_DATA_DIR is
    # set (the compose stacks: the data volume), else it is not kept (a warning at connect).
    fault_state_file: Path | None = None
    # Optional Desk (FR3 System 5+): unlock brakes and enable FCI on connect. Both or neither. The
    # password comes from desk_password_file (a secrets file) or PDE_FRANKA_DESK_PASSWORD.
    desk_user: str = ""
    desk_password_file: Path | None = None
    desk_password: SecretStr = SecretStr("")

    @field_validator("torque_thresholds_nm", "force_thresholds_n")
    @classmethod
    def _positive(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(v <= 0.0 for v in value):
            raise ValueError(f"collision thresholds must be positive, got {value}")
        return value

    @field_validator("torque_thresholds_nm")
    @classmethod
    def _below_joint_torque(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        for i, (t, t_max) in enumerate(zip(value, FR3_JOINT_TORQUE_MAX_NM, strict=True)):
            if t >= t_max:
                raise ValueError(
                    f"torque threshold {t} Nm for joint {i + 1} is not below the {t_max} Nm that joint can "
                    "produce: its collision detection would never fire (use e.g. 10 Nm for joints 5-7)"
                )
        return value

    @field_validator("home_joints_rad")
    @classmethod
    def _home_within_limits(cls, value: Joints7) -> Joints7:
        _check_joints("home", value)
        return value

    @model_validator(mode="after")
    def _fault_state_in_the_data_dir(self) -> FrankaConfig:
        data_dir = os.environ.get("PDE_DATA_DIR", "")
        if self.fault_state_file is None and data_dir:
            self.fault_state_file = Path(data_dir) / FAULT_STATE_NAME
        return self

    @model_validator(mode="after")
    def _desk_pair(self) -> FrankaConfig:
        if self.desk_password_file is not None:
            if self.desk_password.get_secret_value():
                raise ValueError(
                    "give the Desk password once: desk_password_file or PDE_FRANKA_DESK_PASSWORD"
                )
            try:
                password = self.desk_password_file.read_text().strip()
            except OSError as e:
                raise ValueError(
                    f"desk_password_file {self.desk_password_file} cannot be read ({e.strerror}): mount the "
                    "secrets file there, readable by the server's user"
                ) from None
            if not password:
                raise ValueError(f"desk_password_file {self.desk_password_file} is empty")
            self.desk_password = SecretStr(password)
        if bool(self.desk_user) != bool(self.desk_password.get_secret_value()):
            raise ValueError(
                "set both desk_user and desk_password_file (or PDE_FRANKA_DESK_PASSWORD), or neither"
            )
        return self

    @property
    def desk_enabled(self) -> bool:
        return bool(self.desk_user and self.desk_password.get_secret_value())


def _check_joints(what: str, joints: tuple[float, ...]) -> None:
    for i, (q, lo, hi) in enumerate(zip(joints, FR3_JOINT_LOWER_RAD, FR3_JOINT_UPPER_RAD, strict=True)):
        if not lo <= q <= hi:
            raise ValueError(f"{what} joint {i + 1} = {q} rad is outside the FR3 range [{lo}, {hi}]")
