"""A one-shot command's progress as a small JSON file, so a parent (``pde demo``) reads typed fields
instead of scraping the child's log. The child rewrites the file atomically (``files.py``): a
reader sees the previous status or the new one, never half of one.

    pde learner sft ... --status-file data/logs/sft.status.json

    {"job": "sft", "phase": "training", "step": 120, "total_steps": 1000, "loss": 0.0412,
     "cached": false, "checkpoint": ""}
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from pde_contract.codec import decode_json
from pde_contract.files import atomic_write_bytes

Phase = Literal["loading", "training", "done"]


class JobStatus(msgspec.Struct, kw_only=True):
    job: str
    """which command writes it, e.g. "sft" """
    phase: Phase
    """loading (inputs, before the first step), training, done (the result is on disk)"""
    step: int = 0
    """steps finished so far"""
    total_steps: int = 0
    loss: float | None = None
    """the loss of the last step reported"""
    cached: bool = False
    """done without training: a matching result was already on disk"""
    checkpoint: str = ""
    """the file the job produced (when done)"""


def write_status(path: str | Path, status: JobStatus) -> None:
    atomic_write_bytes(path, msgspec.json.encode(status))


def read_status(path: str | Path) -> JobStatus | None:
    """The status in ``path``; None while the file does not exist yet. A file that is not a status
    (another program's) raises ``msgspec.ValidationError`` / ``msgspec.DecodeError``."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    return decode_json(data, JobStatus)
