"""A latched fault kept on disk, so that a restart of the robot server does not clear it: the
operator acknowledges it with a reset (home), as before the restart. Written atomically (a
temporary file renamed over the old one); an unreadable file counts as a fault, never as none."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from pde_contract.messages import RobotFault
from robot_server.robots.base import FaultReport

logger = logging.getLogger(__name__)


class LatchedFaultFile:
    def __init__(self, path: Path | None) -> None:
        self.path = path

    def save(self, report: FaultReport) -> None:
        """Never raises: a fault that cannot be written stays latched in this process all the same."""
        if self.path is None:
            return
        record = {
            "kind": report.kind.value,
            "detail": report.detail,
            "action": report.action,
            "latched_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(record, indent=1))
            os.replace(tmp, self.path)
        except OSError as e:
            logger.error(
                "could not keep the latched fault in %s (%s): a restart would clear it", self.path, e
            )

    def load(self) -> FaultReport | None:
        """The fault latched before a restart (None: none)."""
        if self.path is None or not self.path.exists():
            return None
        try:
            record = json.loads(self.path.read_text())
            kind = RobotFault(record["kind"])
            detail, action, when = str(record["detail"]), str(record["action"]), str(record["latched_at"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            return FaultReport(
                RobotFault.RECOVERY_FAILED,
                f"the latched-fault file {self.path} cannot be read ({type(e).__name__}: {e}).",
                "Check the arm and the workspace, then reset (home) to acknowledge and resume.",
            )
        return FaultReport(kind, f"{detail} (latched {when}, before the robot server restarted)", action)

    def clear(self) -> None:
        if self.path is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError as e:
            logger.error(
                "could not remove %s after the reset (%s): it latches again at restart", self.path, e
            )
