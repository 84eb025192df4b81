"""`pde loop` with no policy checkpoint yet waits for the SFT policy in a state the page shows
(instead of exiting, which compose turned into a restart loop), and stops cleanly on SIGTERM; a
lab task the sim backend cannot lay out leaves the reason in the row the page reads. The store and
the loop process are real; the robot behind the server is the test FakeRobot (no arm here)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from learner.checkpoints import CheckpointStore
from learner.policies.vla import make_test_policy
from operator_ui.routers.loop import loop_state
from operator_ui.settings import UISettings
from pde_contract.service_state import LoopPhase
from pde_storage import Store
from robot_server.server import RobotServer
from robot_server.settings import RobotServerSettings
from tests.contract.test_tasks import tasks_file
from tests.helpers import free_port, pde_command, subprocess_env
from tests.robot_server.fakes import FakeCamera, FakeRobot

DEADLINE_S = 120.0  # generous: the loop imports torch first, on a loaded 2-core machine


def test_the_loop_waits_for_the_sft_policy_and_the_page_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("PDE_")}
    env["PYTHONPATH"] = subprocess_env()["PYTHONPATH"]
    argv = ["loop", "--database-url", url, "--data-dir", str(tmp_path), "--device", "cpu"]
    # Nothing listens at the robot endpoint: the loop must not get that far.
    argv += ["--robot", f"tcp://127.0.0.1:{free_port()}"]
    proc = subprocess.Popen(pde_command(*argv), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + DEADLINE_S
        state = None
        while time.monotonic() < deadline and proc.poll() is None:
            if Path(f"{tmp_path}/pde.db").exists():
                with Store.open(url, tmp_path / "media") as store:
                    state, _, alive = loop_state(store, stale_s=UISettings().service_stale_s)
                if state is not None and state.phase == LoopPhase.WAITING_FOR_POLICY:
                    break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()[0].decode()  # waiting, not exited
        assert state is not None and state.phase == LoopPhase.WAITING_FOR_POLICY and alive, state
        assert (
            state.detail is not None and f"no policy checkpoint in {tmp_path / 'checkpoints'}" in state.detail
        )
        assert "`pde learner sft`" in state.detail
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 0, out.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    with Store.open(url, tmp_path / "media") as store:
        state, _, alive = loop_state(store, stale_s=10.0)
    assert state is not None and state.phase == LoopPhase.STOPPED and not alive


def test_a_lab_task_on_the_sim_backend_says_why_on_the_page(tmp_path: Path) -> None:
    # The robot server answers as the sim backend (its default) with the test FakeRobot behind it.
    CheckpointStore(tmp_path / "checkpoints").save(make_test_policy(), 0, {"sft_loss": 1.0})
    url = f"sqlite:///{tmp_path}/pde.db"
    server_settings = RobotServerSettings(cmd_port=free_port(), obs_port=free_port())
    env = {k: v for k, v in subprocess_env().items() if not k.startswith("PDE_")}
    env["PYTHONPATH"] = subprocess_env()["PYTHONPATH"]
    env["PDE_TASKS_FILE"] = str(tasks_file(tmp_path))
    argv = ["loop", "--database-url", url, "--data-dir", str(tmp_path), "--device", "cpu"]
    argv += ["--robot", server_settings.cmd_endpoint, "--tasks", "stack_cups"]
    with RobotServer(FakeRobot(), [FakeCamera("external"), FakeCamera("wrist")], server_settings):
        done = subprocess.run(pde_command(*argv), env=env, capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.returncode == 2, done
    assert "['stack_cups'] come from the tasks file" in done.stderr
    with Store.open(url, tmp_path / "media") as store:
        state, _, alive = loop_state(store, stale_s=10.0)
    assert state is not None and state.phase == LoopPhase.STOPPED and not alive
    assert "the robot server runs the sim backend" in state.last_error
    assert "['stack_cups'] come from the tasks file" in state.last_error
