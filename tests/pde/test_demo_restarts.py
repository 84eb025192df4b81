"""`pde demo` restarts a crashed child (the learner with only the episodes still to run) up to
MAX_CHILD_RESTARTS times, then stops the run naming the service and its log. Real child processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pde.demo import MAX_CHILD_RESTARTS, Demo, DemoError, parse_args
from pde_storage import Store
from tests.storage.factories import finish_with_videos, make_episode_file

TASK = "put_green_container_in_bowl"


def test_a_crashed_child_is_restarted_then_the_run_stops_with_its_log(tmp_path: Path) -> None:
    demo = Demo(parse_args(["--data-dir", str(tmp_path), "--max-episodes", "5"]))
    demo.data.mkdir(parents=True, exist_ok=True)
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)", "--max-episodes", "5"]
    with Store.open(demo.db_url, tmp_path / "media") as store:
        store.ensure_task(TASK, "put the green container in the bowl")
        ep = store.create_episode(TASK, store.prompts(TASK)[0].id, 0, "bootstrap")
        finish_with_videos(store, ep.id, make_episode_file(ep.id, TASK, n_chunks=2))
        try:
            demo._start("learner", sleeper, lambda: True)
            for n in range(1, MAX_CHILD_RESTARTS + 1):
                old = demo.procs.services["learner"].process
                demo.procs.kill("learner")
                demo.recover("learner", -9, store)
                svc = demo.procs.services["learner"]
                assert svc.alive and svc.process is not old and demo.restarts["learner"] == n
                # one of this run's 5 episodes has ended: the restarted loop runs the other 4
                assert svc.argv[-2:] == ["--max-episodes", "4"]
            demo.procs.kill("learner")
            with pytest.raises(DemoError, match=rf"learner crashed {MAX_CHILD_RESTARTS + 1} times") as e:
                demo.recover("learner", -9, store)
            assert str(tmp_path / "logs" / "learner.log") in str(e.value)
        finally:
            demo.procs.stop_all()
