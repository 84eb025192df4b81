"""A latch kept on disk (an e-stop, a backend's reflex or user stop), so that a restart of the
robot server -- a kill -9 included -- does not clear it: the new server reports it and refuses
motion until the operator's explicit release (``ReleaseEStop``, or ``Reset`` for a fault).

Written atomically (a temporary file, fsynced, renamed over the old one, then the folder fsynced):
after ``save`` returns the latch survives a crash of the process or a power cut. A file that
exists but cannot be read counts as a latch (fail closed), never as none; its record names the
file and how to clear it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

import msgspec

from pde_contract.codec import decode_json

log = logging.getLogger(__name__)


class LatchRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a latch file holds."""

    kind: str  # "estop", or a RobotFault value ("reflex", "user_stop", ...)
    detail: str  # what happened
    action: str  # what the operator must do before motion resumes
    latched_at: str = ""  # UTC, for the operator


class LatchFileError(RuntimeError):
    """The latch file could not be written or removed; the message says which and what to do."""


# A record that could not be read is reported with this kind (fail closed).
UNREADABLE = "unreadable"


class LatchFile:
    """``path`` None: latches are not kept (a warning says so where the server starts).
    ``release``: how the operator clears this latch, for the messages."""

    def __init__(self, path: Path | None, release: str) -> None:
        self.path = path
        self.release = release

    def save(self, record: LatchRecord) -> None:
        """Keep ``record``; durable when this returns. Raises LatchFileError (the latch holds in
        this process all the same: callers latch in memory first)."""
        if self.path is None:
            return
        if not record.latched_at:
            record = msgspec.structs.replace(
                record, latched_at=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            )
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, msgspec.json.format(msgspec.json.encode(record)) + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            _fsync_dir(self.path.parent)
        except OSError as e:
            raise LatchFileError(
                f"could not keep the latch in {self.path} ({e.strerror or e}): it holds until this server "
                "stops, but a restart would clear it. Make the folder writable by the server's user "
                "(compose: the pde-data volume at /data)"
            ) from e

    def load(self) -> LatchRecord | None:
        """The latch kept before a restart; None: none. An unreadable file is a latch of kind
        ``UNREADABLE`` whose detail names the file and the error."""
        if self.path is None:
            return None
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            return self.unreadable(f"{type(e).__name__}: {e.strerror or e}")
        try:
            return decode_json(raw, LatchRecord)
        except msgspec.DecodeError as e:
            return self.unreadable(f"not a latch record: {e}")

    def unreadable(self, why: str) -> LatchRecord:
        log.error("latch file %s cannot be read (%s): treated as latched", self.path, why)
        return LatchRecord(
            kind=UNREADABLE,
            detail=f"the latch file {self.path} cannot be read ({why}), so the server treats it as a "
            "latch that was set before it restarted.",
            action=f"Check the cell, then {self.release}: that removes the file. If the release fails, "
            f"delete {self.path} by hand (as the server's user) and restart the server.",
        )

    def clear(self) -> None:
        """Remove the latch (the operator released it). Raises LatchFileError when the file stays:
        the caller keeps the latch, since a restart would restore it."""
        if self.path is None:
            return
        try:
            self.path.unlink(missing_ok=True)
            _fsync_dir(self.path.parent)
        except OSError as e:
            raise LatchFileError(
                f"could not remove the latch file {self.path} ({e.strerror or e}), so the latch stays (a "
                f"restart would restore it). Delete it by hand (as the server's user), then {self.release} "
                "again"
            ) from e


def _fsync_dir(folder: Path) -> None:
    """Make a rename or unlink in ``folder`` durable (POSIX: the directory entry is the folder's)."""
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
