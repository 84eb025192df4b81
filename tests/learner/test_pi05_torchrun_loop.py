"""`pde loop --policy pi05 --init DIR` under `torchrun --nproc_per_node 2` (gloo, CPU), with DDP and
with FSDP (`--distributed`): rank 0 makes version 0 from the directory, runs episodes on the
simulated robot with simulator labels and a PPO update that rank 1 joins, and saves version 1 (a
single-process checkpoint); both ranks stop cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest

from learner.checkpoints import CheckpointStore
from learner.trainer import Trainer
from pde_storage import Store
from tests.helpers import subprocess_env, torchrun
from tests.learner.pi05_tiny import make_tiny_checkpoint
from tests.operator_ui.browser import sim_robot_server

TASK = "put_green_container_in_bowl"


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["ddp", "fsdp"])
def test_loop_under_torchrun_trains_pi05_on_two_ranks(tmp_path: Path, engine: str) -> None:
    init = make_tiny_checkpoint(tmp_path / "pi05")
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    store.ensure_task(TASK, "put the green container in the bowl")
    store.set_task_state(TASK, stage="rl", alpha=0.5)
    store.set_prompt_status(
        store.add_prompt(TASK, "put the green container in the bowl carefully").id, "pool"
    )
    env = subprocess_env(
        PDE_LOOP_DATABASE_URL=url,
        PDE_LOOP_DATA_DIR=str(tmp_path),
    )
    with sim_robot_server(tmp_path, image_size="32x32") as endpoint:
        cmd = ["-m", "pde", "loop"]
        cmd += ["--auto", "--tasks", TASK, "--max-chunks", "2", "--batch-size", "2", "--max-episodes", "2"]
        cmd += ["--robot", endpoint, "--policy", "pi05", "--init", str(init), "--pi05-flow-steps", "2"]
        cmd += ["--distributed", engine]
        r = torchrun(cmd, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "rank 1 stopped after 1 update(s)" in out, out[-4000:]
    assert f"PPO updates over 2 ranks with {engine.upper()}" in out
    ck = store.latest_checkpoint()
    assert ck is not None and ck.version == 1 and Path(ck.path).is_file()
    saved = CheckpointStore.load(ck.path)  # whole weights and Adam state, in one process
    assert saved.trainer_state is not None and saved.trainer_state["n_updates"] == 1
    Trainer(saved.policy).load_state_dict(saved.trainer_state)
    assert store.metrics("ppo/update_s")
    store.close()
