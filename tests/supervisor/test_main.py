"""``pde supervisor`` as a process, and its settings."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from pde_storage import Store
from supervisor.main import main
from supervisor.settings import SupervisorSettings
from tests.fakes.fake_openai import FakeOpenAIServer
from tests.helpers import pde_command, subprocess_env

TASK, GOAL = "put_green_container_in_bowl", "put the green container in the bowl"


def test_shared_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PDE_DATABASE_URL", "sqlite:////tmp/x.db")
    monkeypatch.setenv("PDE_DATA_DIR", "/tmp/pde-data")
    monkeypatch.setenv("PDE_SUPERVISOR_MODEL", "Qwen/Qwen2.5-VL-7B-Instruct")
    s = SupervisorSettings()
    assert s.database_url == "sqlite:////tmp/x.db" and s.media_dir == Path("/tmp/pde-data/media")
    assert s.model == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert "BASE_URL is empty" in SupervisorSettings(base_url="").vlm_configured()
    assert "API_KEY" in SupervisorSettings().vlm_configured()
    assert SupervisorSettings(base_url="http://127.0.0.1:8001/v1").vlm_configured() == ""


def test_missing_openai_key_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--base-url", "https://api.openai.com/v1", "--once"]) == 2
    assert "PDE_SUPERVISOR_API_KEY is empty" in capsys.readouterr().err


def test_bad_setting_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PDE_SUPERVISOR_FRAMES_PER_ROLLOUT", "40")
    assert main(["--offline", "--once"]) == 2
    assert "frames_per_rollout" in capsys.readouterr().err


def test_the_supervisor_takes_n_from_the_loop_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The compose file of earlier versions set the supervisor's own N: it is ignored, with a warning.
    monkeypatch.setenv("PDE_SUPERVISOR_ROLLOUTS_N", "4")
    monkeypatch.setenv("PDE_SUPERVISOR_FRAMES_PER_ROLLOUT", "40")  # stop at the settings check
    assert main(["--offline", "--once"]) == 2
    assert "PDE_SUPERVISOR_ROLLOUTS_N is ignored" in caplog.text
    assert "rollouts_n" not in SupervisorSettings.model_fields


def test_once_against_fake_vlm_as_subprocess(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url=url, media_dir=str(tmp_path / "media"))
    store.ensure_task(TASK, GOAL)
    store.close()
    with FakeOpenAIServer() as fake:
        env = subprocess_env(PDE_SUPERVISOR_API_KEY="k", PDE_SUPERVISOR_CANDIDATES_K="3")
        proc = subprocess.run(
            [
                *pde_command(
                    "supervisor",
                    "--once",
                    "--database-url",
                    url,
                    "--data-dir",
                    str(tmp_path),
                    "--base-url",
                    fake.base_url,
                    "--model",
                    "fake-vlm",
                )
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert [r["kind"] for r in fake.requests] == ["candidates"]
    store = Store.open(url=url, media_dir=str(tmp_path / "media"))
    try:
        cands = store.prompts(TASK, "candidate")
        assert len(cands) == 3 and {p.source for p in cands} == {"vlm"}
        state = store.service_states()["supervisor"].state
        assert json.loads(json.dumps(state))["proposer"] == "vlm"
    finally:
        store.close()


def test_heartbeat_for_pde_health(tmp_path: Path) -> None:
    import threading

    from pde.health import Unhealthy, check_heartbeat
    from supervisor.service import SupervisorService

    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url=url, media_dir=str(tmp_path / "media"))
    store.ensure_task(TASK, GOAL)
    settings = SupervisorSettings(proposer="offline", poll_interval_s=0.05, database_url=url)
    service = SupervisorService(store, settings, None, None, seed=0)
    stop = threading.Event()
    t = threading.Thread(target=service.run, args=(stop,))
    t.start()
    try:
        deadline = time.monotonic() + 20
        while "supervisor" not in store.service_states() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "supervisor ok" in check_heartbeat("supervisor", url, 30.0)
    finally:
        stop.set()
        t.join(10)
    with pytest.raises(Unhealthy, match="stopped"):
        check_heartbeat("supervisor", url, 30.0)
    # A fresh heartbeat from a service whose poll hangs is not healthy either.
    store.set_service_state("supervisor", {"phase": "running", "poll_running_s": 700.0, "time": time.time()})
    with pytest.raises(Unhealthy, match="one poll has been running for 700 s"):
        check_heartbeat("supervisor", url, 30.0)
    store.close()


def test_check_endpoint(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PDE_SUPERVISOR_API_KEY", "k")
    monkeypatch.setenv("PDE_SUPERVISOR_BACKOFF_INITIAL_S", "0.01")
    with FakeOpenAIServer() as fake:
        assert main(["--check", "--base-url", fake.base_url, "--model", "m"]) == 0
        assert [r["n_images"] for r in fake.requests] == [16] and not fake.requests[0]["problems"]
        assert "ok:" in capsys.readouterr().out
        fake.set_script([{"status": 400}])
        assert main(["--check", "--base-url", fake.base_url, "--model", "m"]) == 1
        assert "--limit-mm-per-prompt" in capsys.readouterr().err
