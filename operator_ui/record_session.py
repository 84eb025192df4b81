"""`pde record` from the page: per task, reset -> record -> stop -> keep or discard with a note.

The same recorder as the CLI (``teleop/recorder.py``: every row through the robot server's safety
path at the control rate) and the same files (``teleop/takes.py``), driven by the page's keys and
gamepad through a ``PageSource`` whose commands the page's server puts in a ``PageCommandBox``.
One worker thread does what moves the arm (a reset, a take), on a robot client of its own, so the
page's requests (and its e-stop) never wait for it. One session per page server; the routes
(``operator_ui/routers/teleop.py``) refuse it while the episode loop moves the arm.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from pde_contract.client import RobotClient, RobotServerError
from pde_contract.link import ClientCurve
from pde_contract.messages import ActionSpace
from pde_contract.tasks import TaskSpec
from teleop.base import TeleopError
from teleop.page import PageCommandBox, PageSource
from teleop.recorder import Recorder, Take
from teleop.settings import TeleopSettings
from teleop.takes import counts_per_task, save_take

log = logging.getLogger(__name__)


class RecordPhase(StrEnum):
    IDLE = "idle"  # no task reset yet, or the last take saved
    RESETTING = "resetting"  # the arm goes to the task's reset pose
    READY = "ready"  # at the reset pose: record
    RECORDING = "recording"  # the page holds control; stop ends the take
    RECORDED = "recorded"  # the take waits: keep or discard, with a note


class RecordRefused(Exception):
    """What the operator asked cannot be done in this phase; the message says what to do."""


@dataclass
class LastTake:
    task: str
    rows: int
    rows_dropped: int
    rows_clipped: int
    watchdog_stops: int  # ticks the page was silent past its watchdog (the arm held)
    task_success: bool | None
    videos: dict[str, Path]
    kept: bool | None = None  # None: not saved yet
    files: list[str] = field(default_factory=list)


@dataclass
class RecordView:
    phase: RecordPhase
    task: str | None
    rows: int  # rows of the take being recorded
    error: str
    last: LastTake | None
    demos_dir: Path
    counts: dict[str, tuple[int, int]]


class RecordSession:
    def __init__(
        self,
        cmd_endpoint: str,
        settings: TeleopSettings,
        demos_dir: Path,
        videos_dir: Path,
        timeout_s: float = 2.0,
        curve: ClientCurve | None = None,
    ) -> None:
        self.cmd_endpoint, self.timeout_s, self.curve = cmd_endpoint, timeout_s, curve
        self.settings = settings
        self.demos_dir, self.videos_dir = demos_dir, videos_dir
        self.box = PageCommandBox()
        self._lock = threading.Lock()
        self._phase = RecordPhase.IDLE
        self._task: TaskSpec | None = None
        self._rows = 0
        self._error = ""
        self._take: Take | None = None
        self._last: LastTake | None = None
        self._worker: threading.Thread | None = None
        self._takes = 0
        self._source: PageSource | None = None  # the take's, while one records

    # --- what the page sees ----------------------------------------------------------------------

    def view(self) -> RecordView:
        with self._lock:
            return RecordView(
                self._phase,
                self._task.name if self._task else None,
                self._rows,
                self._error,
                dataclasses.replace(self._last) if self._last else None,
                self.demos_dir,
                counts_per_task(self.demos_dir),
            )

    @property
    def holds_control(self) -> bool:
        return self._phase is RecordPhase.RECORDING

    @property
    def moving(self) -> bool:
        """The session moves the arm now (a reset, a take)."""
        return self._phase in (RecordPhase.RESETTING, RecordPhase.RECORDING)

    @property
    def busy(self) -> bool:
        """The session moves the arm, or holds a take: the loop's Start waits."""
        return self._phase in (RecordPhase.RESETTING, RecordPhase.RECORDING, RecordPhase.RECORDED)

    # --- what the operator does ------------------------------------------------------------------

    def reset(self, task: TaskSpec, seed: int | None = None) -> None:
        with self._lock:
            self._require(RecordPhase.IDLE, RecordPhase.READY, what="reset the arm")
            self._phase, self._task, self._error = RecordPhase.RESETTING, task, ""
        self._run(lambda rec: rec.reset(task, seed), RecordPhase.READY)

    def record(self) -> None:
        with self._lock:
            self._require(RecordPhase.READY, what="record")
            task = self._task
            assert task is not None
            self._phase, self._rows, self._error = RecordPhase.RECORDING, 0, ""
            source = self._source = PageSource(self.box.latest, self.settings)

        def take(rec: Recorder) -> None:
            with source:
                taken = rec.record(source, task, on_row=self._count_row)
            self._took(taken, source.watchdog_stops)

        self._run(take, RecordPhase.RECORDED)

    def stop(self) -> None:
        """End the take at its next tick, whatever the page sends meanwhile."""
        with self._lock:
            self._require(RecordPhase.RECORDING, what="stop")
            assert self._source is not None
            self._source.request_end()

    def save(self, keep: bool, note: str) -> list[Path]:
        with self._lock:
            self._require(RecordPhase.RECORDED, what="keep or discard")
            take, last = self._take, self._last
            assert take is not None and last is not None
            paths = save_take(self.demos_dir, take, keep, note)
            last.kept, last.files = keep, [str(p) for p in paths]
            self._take, self._phase = None, RecordPhase.IDLE
        log.info("page take of %s %s: %s", take.task, "kept" if keep else "discarded", paths[0])
        return paths

    # --- the worker ------------------------------------------------------------------------------

    def _require(self, *phases: RecordPhase, what: str) -> None:
        if self._phase not in phases:
            allowed = " or ".join(p.value for p in phases)
            raise RecordRefused(
                f"cannot {what} now: the session is {self._phase.value} (it must be {allowed})"
                + ("; keep or discard the take first" if self._phase is RecordPhase.RECORDED else "")
            )

    def _count_row(self, rows: int) -> None:
        self._rows = rows

    def _took(self, take: Take, watchdog_stops: int) -> None:
        """The take is in: its videos (what the operator judges before keeping it) and counts."""
        self._takes += 1
        shutil.rmtree(self.videos_dir, ignore_errors=True)  # only the last take's are kept
        self.videos_dir.mkdir(parents=True, exist_ok=True)
        from pde_storage.media import write_episode_videos

        videos = write_episode_videos(
            take.episodes[ActionSpace.EE_DELTA], self.videos_dir, f"take{self._takes}"
        )
        st = take.stats
        with self._lock:
            self._take = take
            self._last = LastTake(
                take.task,
                st.rows_recorded,
                st.rows_dropped,
                st.rows_clipped or 0,
                watchdog_stops,
                take.task_success,
                videos,
            )

    def _run(self, work: Callable[[Recorder], None], done: RecordPhase) -> None:
        def body() -> None:
            try:
                with RobotClient(
                    self.cmd_endpoint, name="operator-ui-record", timeout_s=self.timeout_s, curve=self.curve
                ) as client:
                    work(Recorder(client, self.settings))
            except Exception as e:  # the thread's end: whatever failed goes to the page
                if not isinstance(e, (TeleopError, RobotServerError)):
                    log.exception("page record session")
                with self._lock:
                    self._error = str(e)
                    # a failed take is gone; the arm is wherever it stopped: reset again
                    self._phase, self._take = RecordPhase.IDLE, None
                return
            with self._lock:
                self._phase = done

        self._worker = threading.Thread(target=body, name="ui-record", daemon=True)
        self._worker.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """The page's server stops: a take in progress ends (not saved), and its worker with it."""
        with self._lock:
            if self._phase is RecordPhase.RECORDING and self._source is not None:
                self._source.request_end()
        if self._worker is not None:
            self._worker.join(timeout_s)
