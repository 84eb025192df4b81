"""`pde loop` end to end: the simulated robot server, the learner's real Actor, policy, Trainer
and checkpoints, auto start + simulator labels, one PPO update in the background."""

from __future__ import annotations

import subprocess
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


@pytest.mark.slow
def test_pde_loop_in_sim_with_ppo(tmp_path: Path) -> None:
    pytest.importorskip("robot_server.sim.world", reason="the simulated robot server is not on this branch")
    pytest.importorskip("learner.actor", reason="the learner's actor is not on this branch")
    url = f"sqlite:///{tmp_path}/pde.db"
    _tiny_checkpoint(tmp_path)
    with Store.open(url, tmp_path / "media") as store:
        store.ensure_task(TASK, "put the green container in the bowl")
        store.set_task_state(TASK, stage="rl", alpha=0.5)
        store.set_prompt_status(store.add_prompt(TASK, "drop the green box into the bowl").id, "pool")
    with sim_robot_server(tmp_path) as endpoint:
        r = subprocess.run(
            pde_command(
                "loop",
                "--auto",
                "--tasks",
                TASK,
                "--max-episodes",
                "3",
                "--max-chunks",
                "2",
                "--batch-size",
                "2",
                "--robot",
                endpoint,
            ),
            env=subprocess_env(PDE_LOOP_DATABASE_URL=url, PDE_LOOP_DATA_DIR=str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with Store.open(url, tmp_path / "media") as store:
        eps = store.episodes()
        assert len(eps) == 3 and all(e.status == "labelled" for e in eps), [
            (e.status, e.abort_reason) for e in eps
        ]
        assert all([lab.source for lab in store.labels(e.id)] == ["simulator"] for e in eps)
        f = store.load_episode_file(eps[0].id)
        assert 1 <= len(f.chunks) <= 2 and "log_prob" in f.chunks[0].extras
        assert all(Path(p).stat().st_size > 0 for p in eps[0].video_paths.values())
        assert sorted(eps[0].video_paths) == ["external", "wrist"]
        ck = store.latest_checkpoint()
        assert ck is not None and ck.version == 1 and Path(ck.path).is_file()
        assert ck.metrics["trained_through_episode_id"] == eps[1].id
        assert store.metrics("ppo/update_s")
        assert store.task_state(TASK).iteration == 1
