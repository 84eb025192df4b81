"""The Camera boundary: a named colour stream delivering JPEG frames stamped on the host clock."""

from __future__ import annotations

import abc

from pde_contract.messages import CameraFrame, CameraIntrinsics


class CameraError(RuntimeError):
    """The camera failed (unplugged, timed out, stale). The message says what to do."""


class Camera(abc.ABC):
    name: str

    @abc.abstractmethod
    def connect(self) -> None: ...

    @abc.abstractmethod
    def disconnect(self) -> None: ...

    @property
    @abc.abstractmethod
    def is_connected(self) -> bool: ...

    @abc.abstractmethod
    def read(self, timeout_s: float = 0.5) -> CameraFrame:
        """The newest frame (JPEG). Raises CameraError when none newer than the camera's maximum
        age arrives within ``timeout_s``."""

    @property
    def intrinsics(self) -> CameraIntrinsics | None:
        return None

    def __enter__(self) -> Camera:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()
