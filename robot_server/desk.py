"""Optional Desk helper (FR3 System 5+): take control, unlock the brakes and enable FCI before the
backend connects. Used only when Desk credentials are configured ([franka] desk_user and desk_password_file);
otherwise the operator does this in the Desk web page.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from robot_server.robots.base import RobotNotConnectedError
from robot_server.robots.franka.deadline import call_with_deadline

if TYPE_CHECKING:  # franky is imported where an FR3 is driven: the sim-only server runs without it
    import franky

logger = logging.getLogger(__name__)


class DeskHelper:
    def __init__(
        self,
        host: str,
        user: str,
        password: str,
        timeout_s: float = 60.0,
        make_desk: Callable[[str, str, str], Any] | None = None,
    ) -> None:
        if not user or not password:
            raise ValueError(
                "DeskHelper needs both a Desk user and password ([franka] desk_user, desk_password_file)"
            )
        self.host = host
        self.user = user
        self._password = password
        self.timeout_s = timeout_s
        self._make_desk = make_desk or self._franky_desk

    @staticmethod
    def _franky_desk(host: str, user: str, password: str) -> franky.Desk:
        from franky import Desk

        return Desk(host, user, password)

    def prepare(self) -> None:
        """Take control, unlock the brakes, enable FCI. Raises with what to do on failure."""

        def run() -> None:
            with self._make_desk(self.host, self.user, self._password) as desk:
                desk.take_control(wait_timeout=min(30.0, self.timeout_s))
                desk.unlock_brakes()
                desk.enable_fci()

        try:
            call_with_deadline(run, self.timeout_s, "franka-desk")
        except Exception as e:
            raise RobotNotConnectedError(
                f"Desk at https://{self.host} could not prepare the arm ({type(e).__name__}: {e}). Check "
                "the Desk user/password, release control in any open Desk page, and that the external "
                "activation device (the 'enabling' button) is released; or unlock the brakes and enable "
                "FCI by hand in Desk and remove desk_user/desk_password_file from the robot configuration."
            ) from e
        logger.info("Desk at %s: brakes unlocked, FCI enabled", self.host)
