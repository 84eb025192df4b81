"""The page's connection to the robot server: the newest frame of each camera for the live view
(a background thread), plus e-stop / release / status on demand."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pde_contract.link import ClientCurve

log = logging.getLogger(__name__)


@dataclass
class LiveView:
    frames: dict[str, bytes] = field(default_factory=dict)  # camera -> JPEG
    frame_time_s: dict[str, float] = field(default_factory=dict)
    observation_time_s: float = 0.0
    estopped: bool | None = None
    episode_id: str = ""
    task_success: bool | None = None
    ee_position_m: list[float] = field(default_factory=list)
    gripper_width_m: float | None = None


class RobotUnavailableError(RuntimeError):
    pass


class RobotLink:
    def __init__(self, cmd_endpoint: str, timeout_s: float = 1.0, curve: ClientCurve | None = None) -> None:
        self.cmd_endpoint = cmd_endpoint
        self.timeout_s = timeout_s
        self._view = LiveView()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error = ""
        self._client: Any = None
        try:
            from pde_contract.client import RobotClient
        except ImportError as e:  # the wire client is part of the robot-server work
            self.error = f"pde_contract.client unavailable ({e})"
            return
        self._client = RobotClient(cmd_endpoint, name="operator-ui", timeout_s=timeout_s, curve=curve)

    @property
    def available(self) -> bool:
        return self._client is not None

    def start(self) -> None:
        if self._client is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._watch, name="ui-live-view", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                obs = self._client.latest_observation(timeout_s=1.0)
            except Exception as e:  # server down or restarting: show it, keep trying
                self.error = f"no observation from the robot server: {e}"
                continue
            self.error = ""
            view = LiveView(
                frames={c.name: bytes(c.jpeg) for c in obs.cameras},
                frame_time_s={c.name: c.capture_time_s for c in obs.cameras},
                observation_time_s=obs.publish_time_s,
                estopped=obs.estopped,
                episode_id=obs.episode_id,
                task_success=obs.task_success,
                ee_position_m=[float(x) for x in obs.state.ee_position_m],
                gripper_width_m=float(obs.state.gripper_width_m),
            )
            with self._lock:
                self._view = view

    def view(self) -> LiveView:
        with self._lock:
            return self._view

    def _need(self) -> Any:
        if self._client is None:
            raise RobotUnavailableError(f"no robot client: {self.error}")
        return self._client

    def estop(self, reason: str) -> None:
        self._need().estop(reason)

    def release_estop(self) -> None:
        self._need().release_estop()

    def status(self) -> Any:
        return self._need().status()

    def health(self) -> Any:
        return self._need().health()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._client is not None:
            self._client.close()


def observation_age_s(view: LiveView) -> float | None:
    return None if not view.observation_time_s else max(0.0, time.time() - view.observation_time_s)
