"""kill -9 of the loop process mid-episode, then a restart: no labelled episode or label is lost,
and the interrupted episode is aborted with a reason."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pde_storage import Store
from tests.helpers import subprocess_env


def _start(url: str, media: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.learner.loop.fake_loop_proc", url, str(media)],
        env=subprocess_env(),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


# Counts from the process's start: at a load average of 20 on 2 cores its imports alone took 28 s,
# and with 60 s here no episode had run yet (a failure that only says "not yet"). A hung loop still
# fails here, and a lost label or episode fails the checks after the restart.
STARTED_AND_RUNNING_S = 180.0


def _wait_running_after(store: Store, n_labelled: int, proc: subprocess.Popen[bytes], log: Path) -> int:
    deadline = time.monotonic() + STARTED_AND_RUNNING_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"loop process exited: {log.read_text()[-2000:]}"
        if store.count_episodes(status="labelled") >= n_labelled:
            running = store.episodes(status="running")
            if running:
                return running[0].id
        time.sleep(0.02)
    raise AssertionError(f"no running episode after {n_labelled} labelled ones: {log.read_text()[-2000:]}")


def test_kill9_mid_episode_then_restart(db_url: str, tmp_path: Path) -> None:
    media, log = tmp_path / "media", tmp_path / "loop.log"
    store = Store.open(db_url, media)
    proc = _start(db_url, media, log)
    try:
        # An episode can end between the look and the kill (a loaded machine may pause this thread
        # longer than an episode lasts): then the kill fell between episodes and we try again.
        running: list[Any] = []
        for _attempt in range(3):
            _wait_running_after(store, 3, proc, log)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            running = store.episodes(status="running")  # what the dead process left running
            if running:
                break
            proc = _start(db_url, media, log)
        assert running, "three kills in a row all fell between episodes"
        victim = running[0].id
        before = {e.id: (e.status, e.success) for e in store.episodes(status="labelled")}
        labels_before = {i: store.labels(i) for i in before}
        assert len(before) >= 3 and store.episode(victim).status == "running"

        proc = _start(db_url, media, log)
        _wait_running_after(store, len(before) + 1, proc, log)
        v = store.episode(victim)
        assert v.status == "aborted" and "interrupted" in v.abort_reason and "killed" in v.abort_reason
        for i, (status, success) in before.items():
            e = store.episode(i)
            assert (e.status, e.success) == (status, success)
            assert store.labels(i) == labels_before[i]
            assert Path(e.file_path).is_file() and all(Path(p).is_file() for p in e.video_paths.values())
        assert max(e.id for e in store.episodes(status="labelled")) > victim  # it went on
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        store.close()
