"""Settings of ``pde robot-server``: the ``[robot]`` section of the robot configuration file
(robot_server/config_file.py), overridden by environment variables ``PDE_ROBOT_<FIELD>`` (e.g.
``PDE_ROBOT_CONTROL_RATE_HZ=15``), overridden by command-line flags."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from pde_contract.link import ENV_CLIENTS_DIR, ENV_SERVER_SECRET_KEY, ServerCurve, is_loopback
from robot_server.cameras.realsense.camera import RealSenseStream
from robot_server.config_file import FileSettings
from robot_server.safety import ClipPolicy, SafetyLimits

_LIMITS = SafetyLimits()  # the one home of the safety defaults


# The control thread's SCHED_FIFO priority on hardware. Below 50, where the kernel's threaded IRQ
# handlers run (PREEMPT_RT): above them a busy tick would delay the NIC interrupts that carry
# libfranka's 1 kHz state packets. libfranka's own control thread runs at 99 either way.
HARDWARE_RT_PRIORITY = 40
MAX_RT_PRIORITY = 49
ESTOP_STATE_NAME = "robot_estop.json"  # under PDE_DATA_DIR, beside [franka]'s robot_fault.json


class RobotServerSettings(FileSettings):
    model_config = SettingsConfigDict(env_prefix="PDE_ROBOT_", extra="ignore")
    config_section = "robot"

    backend: Literal["sim", "franka"] = "sim"
    server_name: str = "pde-robot-server"
    # Interface to bind; the one advertised to clients is ``advertise_host`` (bind host if empty).
    host: str = "127.0.0.1"
    advertise_host: str = ""
    cmd_port: int = Field(default=5556, ge=1, le=65535)
    obs_port: int = Field(default=5555, ge=1, le=65535)
    # The robot link's CURVE keys (pde_contract/link.py; `pde keys init`): this server's
    # NAME.key_secret and the folder of the clients' *.key files it accepts. Both or neither;
    # without them only a loopback host may be bound.
    link_secret_key: Path | None = None
    link_clients_dir: Path | None = None

    control_rate_hz: float = Field(default=10.0, gt=0, le=100)
    # realtime: one tick per period (demo, operator page, hardware). fast (tests, benchmarks, sim
    # only): chunk rows run back to back and observations are published once per tick; an idle arm
    # still ticks at the control rate so the stream never stops, but simulated time passes only with
    # chunk rows (not while the policy infers), so an episode does not depend on the machine's load
    # (ExecutorConfig.realtime; docs/sim.md, "Fast pacing").
    pacing: Literal["realtime", "fast"] = "realtime"
    # "per_camera": one capture thread per camera (hardware: each read blocks on its own device);
    # "shared": one thread reads every camera in turn (sim cameras share one renderer). Empty: by
    # backend (sim: shared, franka: per_camera).
    capture_threads: Literal["", "per_camera", "shared"] = ""
    camera_fps: float = Field(default=30.0, gt=0, le=120)
    # SCHED_FIFO priority of the control thread (0: normal). Needs CAP_SYS_NICE; realtime pacing
    # only. None: by backend (sim: 0, franka: HARDWARE_RT_PRIORITY). At most MAX_RT_PRIORITY.
    rt_priority: int | None = Field(default=None, ge=0, le=MAX_RT_PRIORITY)
    # 0 disables the watchdog (sim only); robot_server/config_check.py bounds it against the rate
    heartbeat_timeout_s: float = Field(default=0.2, ge=0)
    # The command thread not turning for this long (one request stuck) drops the chunk and holds
    # the arm; Health then reports it. Far above any request's handling time (< 10 ms).
    command_stall_timeout_s: float = Field(default=2.0, gt=0)
    obs_sndhwm: int = Field(default=2, ge=1)  # messages queued per subscriber before dropping
    reset_timeout_s: float = Field(default=60.0, gt=0)
    # Where a latched e-stop is kept (fsynced before the e-stop is acknowledged), so a restart of
    # the server -- a kill -9 too -- does not release it. None: <PDE_DATA_DIR>/robot_estop.json
    # where PDE_DATA_DIR is set (the compose stacks: the data volume), else it is not kept (the
    # start says so). The FR3's reflexes and user stops: [franka] fault_state_file.
    estop_state_file: Path | None = None

    # Sim backend
    image_width: int = Field(default=224, ge=16)
    image_height: int = Field(default=224, ge=16)
    cameras: list[str] = Field(default_factory=lambda: ["external", "wrist"])
    # Scatter of task resets: 1 = the whole layout box, any yaw; less for a narrow start (benchmarks)
    sim_layout_spread: float = Field(default=1.0, ge=0.0, le=1.0)
    # Sim speed profile (robot_server/sim/profile.py): "default" for the demo, recordings and
    # tests; "fast" (coarser physics, shorter IK; different episodes) only for benchmarks that
    # calibrate their premise with it (docs/sim.md, "Speed profiles").
    sim_profile: Literal["default", "fast"] = "default"
    # Franka backend: the arm's own settings are PDE_FRANKA_*; this overrides PDE_FRANKA_HOST if set
    fci_host: str = ""
    realsense_serials: dict[str, str] = Field(default_factory=dict)  # camera name -> serial number
    # camera name -> resolution, fps, exposure, white balance (a camera not named: the defaults)
    realsense: dict[str, RealSenseStream] = Field(default_factory=dict)

    # Safety (see robot_server/safety.py for the clip policy). The defaults live in SafetyLimits.
    clip_policy: ClipPolicy = _LIMITS.clip_policy
    workspace_min_m: tuple[float, float, float] = _LIMITS.workspace_min_m
    workspace_max_m: tuple[float, float, float] = _LIMITS.workspace_max_m
    max_flange_reach_m: float = Field(default=_LIMITS.max_flange_reach_m, gt=0.2, le=0.855)
    # Per control tick. At most 10 cm and 0.5 rad: the safety layer's step, not a speed knob (0.05 m
    # at 10 Hz is 0.5 m/s; a policy that needs more is wrong, not slow).
    max_step_translation_m: float = Field(default=_LIMITS.max_step_translation_m, gt=0, le=0.1)
    max_step_rotation_rad: float = Field(default=_LIMITS.max_step_rotation_rad, gt=0, le=0.5)
    max_tool_tilt_rad: float = Field(default=_LIMITS.max_tool_tilt_rad, gt=0, le=3.1416)
    wrist_margin_rad: float = Field(default=_LIMITS.wrist_margin_rad, ge=0, lt=1)
    joint_margin_rad: float = Field(default=_LIMITS.joint_margin_rad, ge=0, le=0.3)
    joint_velocity_fraction: float = Field(default=_LIMITS.joint_velocity_fraction, gt=0, le=1)
    max_chunk_steps: int = Field(default=_LIMITS.max_chunk_steps, ge=1)

    @field_validator("backend", mode="before")
    @classmethod
    def _known_backend(cls, v: object) -> object:
        if v not in ("sim", "franka"):
            raise ValueError(f"unknown backend {v!r}: use 'sim' or 'franka'")
        return v

    @model_validator(mode="after")
    def _ports_differ(self) -> RobotServerSettings:
        if not self.capture_threads:
            self.capture_threads = "shared" if self.backend == "sim" else "per_camera"
        if self.rt_priority is None:
            self.rt_priority = 0 if self.backend == "sim" else HARDWARE_RT_PRIORITY
        # A camera left out of `cameras` (e.g. PDE_ROBOT_CAMERAS='[]' for a dry run) may keep its
        # serial and settings; a name in neither is a typo.
        known = set(self.cameras) | set(self.realsense_serials)
        unknown = sorted(set(self.realsense) - known)
        if unknown:
            raise ValueError(
                f"realsense settings for unknown camera(s) {unknown}: the cameras are {sorted(known)}"
            )
        data_dir = os.environ.get("PDE_DATA_DIR", "")
        if self.estop_state_file is None and data_dir:
            self.estop_state_file = Path(data_dir) / ESTOP_STATE_NAME
        if self.cmd_port == self.obs_port:
            raise ValueError(f"cmd_port and obs_port are both {self.cmd_port}: give them different ports")
        self.safety_limits()  # validates the box and ranges, naming the bad value
        self.link_curve()  # reads the keys now, so a bad file stops the start with its name
        return self

    def link_curve(self) -> ServerCurve | None:
        """The CURVE keys of both sockets, or None for a plain loopback link."""
        if self.link_secret_key is None and self.link_clients_dir is None:
            if not is_loopback(self.host):
                raise ValueError(
                    f"host {self.host!r} is not loopback and the robot link has no keys: anyone who "
                    f"reaches {self.host} could move the arm and watch the cameras. Create keys with "
                    f"`pde keys init DIR` and set {ENV_SERVER_SECRET_KEY} and {ENV_CLIENTS_DIR} "
                    "(docs/lab-setup.md), or bind host 127.0.0.1"
                )
            return None
        if self.link_secret_key is None or self.link_clients_dir is None:
            missing = ENV_SERVER_SECRET_KEY if self.link_secret_key is None else ENV_CLIENTS_DIR
            raise ValueError(f"{ENV_SERVER_SECRET_KEY} and {ENV_CLIENTS_DIR} go together: set {missing} too")
        return ServerCurve.from_files(self.link_secret_key, self.link_clients_dir)

    def safety_limits(self) -> SafetyLimits:
        return SafetyLimits(
            workspace_min_m=self.workspace_min_m,
            workspace_max_m=self.workspace_max_m,
            max_flange_reach_m=self.max_flange_reach_m,
            max_step_translation_m=self.max_step_translation_m,
            max_step_rotation_rad=self.max_step_rotation_rad,
            max_tool_tilt_rad=self.max_tool_tilt_rad,
            wrist_margin_rad=self.wrist_margin_rad,
            joint_margin_rad=self.joint_margin_rad,
            joint_velocity_fraction=self.joint_velocity_fraction,
            max_chunk_steps=self.max_chunk_steps,
            clip_policy=self.clip_policy,
        )

    @property
    def cmd_endpoint(self) -> str:
        return f"tcp://{self.advertise_host or self.host}:{self.cmd_port}"

    @property
    def obs_endpoint(self) -> str:
        return f"tcp://{self.advertise_host or self.host}:{self.obs_port}"
