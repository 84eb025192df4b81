"""A run a lab can read: each run of the loop or of SFT gets its own folder under
``DataLayout.runs`` (``<data>/logs/runs/<kind>-<UTC time>``) holding TensorBoard event files of
every curve it writes (names from pde_contract/run_metrics.py) and, for the loop, one JSON line per
labelled episode (``RunEpisode``). ``tensorboard --logdir <data>/logs/runs`` shows them;
``pde report`` turns a folder into one HTML page. Weights & Biases gets the same scalars when a
project is named (off by default)."""

from __future__ import annotations

import logging
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from pde_contract.run_metrics import RUN_EPISODES_FILE, RunEpisode

log = logging.getLogger(__name__)


class RunLogError(RuntimeError):
    """The run's log cannot be written as asked (W&B named but not installed)."""


def run_dir_name(kind: str, now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{kind}-{stamp}-{os.getpid()}"


class RunLog:
    """Scalars to TensorBoard (and W&B), episodes to ``episodes.jsonl``. Close it (``with``): the
    TensorBoard writer runs a flushing thread until then."""

    def __init__(
        self, directory: Path, wandb_project: str = "", config: dict[str, Any] | None = None
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._wandb: Any = None
        if wandb_project:
            try:
                import wandb
            except ModuleNotFoundError as e:
                raise RunLogError(
                    f"a Weights & Biases project is named ({wandb_project!r}) but wandb is not installed: "
                    "`pip install wandb`, or leave the project empty (PDE_WANDB_PROJECT)"
                ) from e
            self._wandb = wandb.init(
                project=wandb_project, name=self.directory.name, dir=str(self.directory), config=config or {}
            )
        self._writer = SummaryWriter(log_dir=str(self.directory), flush_secs=10)
        self._lock = threading.Lock()  # the loop's thread and a trainer's may both write
        self._episodes = (self.directory / RUN_EPISODES_FILE).open("ab")

    @classmethod
    def start(
        cls, runs_dir: Path, kind: str, wandb_project: str = "", config: dict[str, Any] | None = None
    ) -> RunLog:
        """A new run folder under ``runs_dir`` (``DataLayout.runs``)."""
        run = cls(Path(runs_dir) / run_dir_name(kind), wandb_project, config)
        log.info("run log in %s (tensorboard --logdir %s)", run.directory, runs_dir)
        return run

    def scalar(self, name: str, value: float, step: int) -> None:
        with self._lock:
            self._writer.add_scalar(name, float(value), int(step))
            if self._wandb is not None:
                # No step=: W&B wants one rising step per run, and PPO's x (versions) is not the
                # loop's (labelled episodes); each curve carries its own x instead.
                self._wandb.log({name: float(value), f"{name}/x": int(step)})

    def episode(self, record: RunEpisode) -> None:
        with self._lock:
            self._episodes.write(msgspec.json.encode(record) + b"\n")
            self._episodes.flush()

    def flush(self) -> None:
        with self._lock:
            self._writer.flush()

    def close(self) -> None:
        with self._lock:
            self._writer.close()
            self._episodes.close()
            if self._wandb is not None:
                self._wandb.finish()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
