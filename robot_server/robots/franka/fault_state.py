"""A latched fault kept on disk (robot_server/latch_file.py), so that a restart of the robot server
does not clear it: the operator acknowledges it with a reset (home), as before the restart. An
unreadable file counts as a fault, never as none."""

from __future__ import annotations

import logging
from pathlib import Path

from pde_contract.messages import RobotFault
from robot_server.latch_file import UNREADABLE, LatchFile, LatchFileError, LatchRecord
from robot_server.robots.base import FaultReport

logger = logging.getLogger(__name__)


class LatchedFaultFile:
    def __init__(self, path: Path | None) -> None:
        self._file = LatchFile(path, "reset (home) to acknowledge it")

    @property
    def path(self) -> Path | None:
        return self._file.path

    def save(self, report: FaultReport) -> None:
        """Never raises: a fault that cannot be written stays latched in this process all the same."""
        try:
            self._file.save(LatchRecord(report.kind.value, report.detail, report.action))
        except LatchFileError as e:
            logger.error("%s", e)

    def load(self) -> FaultReport | None:
        """The fault latched before a restart (None: none)."""
        record = self._file.load()
        if record is None:
            return None
        if record.kind != UNREADABLE:
            try:
                kind = RobotFault(record.kind)
            except ValueError:
                record = self._file.unreadable(f"unknown fault kind {record.kind!r}")
            else:
                return FaultReport(
                    kind,
                    f"{record.detail} (latched {record.latched_at}, before the robot server restarted)",
                    record.action,
                )
        return FaultReport(RobotFault.RECOVERY_FAILED, record.detail, record.action)

    def clear(self) -> None:
        """Raises LatchFileError when the file stays (the reset must then not resume motion)."""
        self._file.clear()
