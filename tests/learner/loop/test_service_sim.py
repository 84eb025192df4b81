"""`pde loop` end to end: the simulated robot server, the learner's real Actor, policy, Trainer
and checkpoints, auto start + simulator labels, a PPO update in the background; killed with
SIGKILL mid-episode and restarted: nothing labelled is lost, the interrupted episode is aborted
with a reason, and the loop goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pde_storage import Store
from tests.helpers import pde_command, subprocess_env
from tests.operator_ui.browser import sim_robot_server

TASK = "put_green_container_in_bowl"


def _tiny_checkpoint(data_dir: Path) -> None:
    from learner.checkpoints import CheckpointStore
    from learner.policies.vla import SmallVLAPolicy, VLAConfig

    policy = SmallVLAPolicy(
        VLAConfig(text_encoder="fake-hashing", hidden_dim=32, image_size_px=32, chunk_len=4)
    )
    CheckpointStore(data_dir / "checkpoints").save(policy, 0, {"sft_loss": 1.0})


def _loop_cmd(endpoint: str, *extra: str) -> list[str]:
    return pde_command(
        "loop",
        "--auto",
        "--tasks",
        TASK,
        "--max-chunks",
        "3",
        "--batch-size",
        "2",
        "--robot",
        endpoint,
        *extra,
    )


def _rl_data_dir(tmp_path: Path) -> tuple[dict[str, str], Store]:
    """A data folder with the SFT checkpoint and the task in RL; the loop's environment and the store."""
    url = f"sqlite:///{tmp_path}/pde.db"
    env = subprocess_env(PDE_LOOP_DATABASE_URL=url, PDE_LOOP_DATA_DIR=str(tmp_path))
    _tiny_checkpoint(tmp_path)
    store = Store.open(url, tmp_path / "media")
    store.ensure_task(TASK, "put the green container in the bowl")
    store.set_task_state(TASK, stage="rl", alpha=0.5)
    return env, store


@pytest.mark.slow
def test_pde_loop_in_sim_kill9_restart_and_ppo(tmp_path: Path) -> None:
    env, store = _rl_data_dir(tmp_path)
    store.set_prompt_status(store.add_prompt(TASK, "drop the green box into the bowl").id, "pool")
    log = tmp_path / "loop.log"
    with sim_robot_server(tmp_path) as endpoint:
        # Run 1: killed with SIGKILL while an episode after the first runs. The episode can end
        # between the look and the kill (a loaded machine pauses this thread); then it is run again.
        victim = None
        for _attempt in range(3):
            proc = subprocess.Popen(
                _loop_cmd(endpoint), env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT
            )
            try:
                deadline = time.monotonic() + 150
                while True:
                    assert proc.poll() is None, log.read_text()[-3000:]
                    assert time.monotonic() < deadline, log.read_text()[-3000:]
                    if store.count_episodes(status="labelled") >= 1 and store.episodes(status="running"):
                        break
                    time.sleep(0.02)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
            finally:
                if proc.poll() is None:
                    proc.kill()
            running = store.episodes(status="running")  # what the dead process left running
            if running:
                victim = running[0].id
                break
        assert victim is not None, "three kills in a row all fell between episodes"
        labelled_before = {e.id: (e.success, store.labels(e.id)) for e in store.episodes(status="labelled")}
        # Run 2: resumes; with one labelled RL episode already stored, two more make a PPO batch.
        r = subprocess.run(
            _loop_cmd(endpoint, "--max-episodes", "2"), env=env, capture_output=True, text=True, timeout=240
        )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    v = store.episode(victim)
    assert v.status == "aborted" and "interrupted" in v.abort_reason
    for i, (success, labels) in labelled_before.items():
        assert store.episode(i).success == success and store.labels(i) == labels
    eps = [e for e in store.episodes() if e.status != "aborted"]
    assert len(eps) == len(labelled_before) + 2 and all(e.status == "labelled" for e in eps)
    assert all(lab.source == "simulator" for e in eps for lab in store.labels(e.id))
    f = store.load_episode_file(eps[-1].id)
    assert 1 <= len(f.chunks) <= 3 and f.chunks[0].trace is not None
    timing = store.chunks(eps[-1].id)  # written by the actor, stored per chunk
    assert timing and all(c.inference_s is not None and c.sent_time_s for c in timing)
    assert sorted(eps[-1].video_paths) == ["external", "wrist"]
    assert all(Path(p).stat().st_size > 0 for p in eps[-1].video_paths.values())
    ck = store.latest_checkpoint()
    assert ck is not None and ck.version == 1 and Path(ck.path).is_file()
    assert ck.trained_through_episode_id == eps[1].id
    assert store.metrics("ppo/update_s") and store.task_state(TASK).iteration == 1
    store.close()


@pytest.mark.slow
def test_pde_loop_in_sim_writes_a_run_tensorboard_reads_and_pde_report_pages(tmp_path: Path) -> None:
    """A short `pde loop` in the simulator (two episodes, one PPO update): its run folder's event
    files read back with TensorBoard's own reader, and `pde report` writes the page with the run's
    per-prompt table and links to the episodes' videos."""
    from pde_contract.run_metrics import PPO_UPDATE_WALL_S, TaskCurve, ppo_metric, task_metric
    from tests.learner.loop.test_run_log import read_scalars

    env, store = _rl_data_dir(tmp_path)
    with sim_robot_server(tmp_path) as endpoint:
        r = subprocess.run(
            _loop_cmd(endpoint, "--max-episodes", "2"), env=env, capture_output=True, text=True, timeout=240
        )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / "runs").iterdir()
    scalars = read_scalars(run_dir)
    assert [s for s, _ in scalars[task_metric(TASK, TaskCurve.ALPHA)]] == [1, 2]
    assert len(scalars[task_metric(TASK, TaskCurve.EPISODE_S)]) == 2
    assert all(v > 0 for _, v in scalars[task_metric(TASK, TaskCurve.EPISODE_S)])
    for stat in ("pg_loss", "v_loss", "approx_kl", "clipfrac"):
        assert [s for s, _ in scalars[ppo_metric(stat)]] == [1], stat
    assert [s for s, _ in scalars[PPO_UPDATE_WALL_S]] == [1]
    r = subprocess.run(
        pde_command("report", "--data-dir", str(tmp_path)),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    page = (run_dir / "report.html").read_text()
    assert "put the green container in the bowl</td><td>canonical</td><td>2</td>" in page
    eps = store.episodes(status="labelled")
    for e in eps:
        for video in e.video_paths.values():
            assert f'href="{os.path.relpath(video, run_dir)}"' in page
            assert (run_dir / os.path.relpath(video, run_dir)).is_file()
    store.close()
