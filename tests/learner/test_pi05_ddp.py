"""One PPO update under DDP with 2 CPU processes (torchrun, gloo) equals the single-process update."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from learner.synthetic import synthetic_episode
from learner.trainer import Trainer
from pde_contract.episodes import write_episode
from tests.learner.pi05_ddp_worker import CONFIG, load_policy, read_batch
from tests.learner.pi05_tiny import make_tiny_checkpoint

REPO = Path(__file__).resolve().parents[2]
CANON = "put the green container in the bowl"
OTHER = "put the green container in front of the camera carefully"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ddp_update_on_two_processes_equals_the_single_process_update(tmp_path):
    init = make_tiny_checkpoint(tmp_path / "pi05")
    policy = load_policy(init)
    rng = np.random.default_rng(0)
    listing = []
    for i in range(4):  # 8 chunks: minibatches of 3, 3 and 2 rows
        ep = synthetic_episode(policy, rng, 2, OTHER if i % 2 else CANON, CANON, i < 2, 24, f"e{i}")
        write_episode(tmp_path / f"e{i}.msgpack", ep)
        listing.append([str(tmp_path / f"e{i}.msgpack"), float(i < 2)])
    (tmp_path / "batch.json").write_text(json.dumps(listing))

    single = load_policy(init)
    stats = Trainer(single, CONFIG).update(read_batch(tmp_path / "batch.json"))

    out = tmp_path / "ddp.pt"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    worker = [str(REPO / "tests" / "learner" / "pi05_ddp_worker.py"), str(init), str(tmp_path / "batch.json")]
    for _attempt in range(3):  # the free port can be taken between probing and binding: try another
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2"]
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", *worker, str(out)]
        proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
        if proc.returncode == 0 or "address already in use" not in (proc.stdout + proc.stderr).lower():
            break
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ddp = torch.load(out, weights_only=False)

    assert ddp["stats"]["minibatch_steps"] == stats["minibatch_steps"] >= 3
    assert abs(ddp["stats"]["pg_loss"] - stats["pg_loss"]) < 1e-5
    moved = 0
    start = load_policy(init).state_dict()
    for name, value in single.state_dict().items():
        torch.testing.assert_close(ddp["state_dict"][name], value, atol=2e-6, rtol=1e-4, msg=name)
        moved += not torch.equal(value, start[name])
    assert moved > 50  # the update changed the network, and both runs changed it alike
