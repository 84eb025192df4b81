"""One PPO update under DDP or FSDP, one torchrun process per rank (run by
tests/learner/test_pi05_ddp.py and test_fsdp.py):
``python -m torch.distributed.run ... pi05_ddp_worker.py INIT BATCH OUT [ENGINE [RESUME]]``.

INIT: a tiny π0.5 checkpoint directory, or a policy checkpoint file (the small policy); π0.5's
options are ``OPTIONS`` unless ``PDE_TEST_PI05_OPTIONS`` (JSON of Pi05Options fields) says. ENGINE: ddp
(default) or fsdp. RESUME: a policy checkpoint whose weights and optimiser state the ranks start
from instead. Rank 0 writes ``OUT`` (the updated weights and the update's diagnostics) and
``OUT.ckpt`` (a policy checkpoint with the trainer state, as the loop saves one)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from learner.checkpoints import CheckpointStore
from learner.distributed import (
    BroadcastTrainer,
    DistributedPolicy,
    DistributedTrainer,
    Engine,
    end_distributed,
    follow_updates,
    init_distributed,
)
from learner.policies.base import Policy
from learner.policies.pi05 import Pi05Options, load_pi05
from learner.ppo import PPOConfig
from learner.trainer import Batch
from pde_contract.episodes import read_episode
from tests.helpers import subprocess_env, torchrun

OPTIONS = Pi05Options(flow_steps=2)
# 3-row minibatches over 2 ranks: uneven shares (2 + 1 padded) are part of what is tested.
CONFIG = PPOConfig(minibatch_size=3, update_epochs=2, learning_rate=1e-3, seed=0)


def load_policy(init: Path, options: Pi05Options | None = None) -> Policy:
    if init.is_file():
        return CheckpointStore.load(init).policy
    if options is None:
        given = os.environ.get("PDE_TEST_PI05_OPTIONS")
        options = Pi05Options(**json.loads(given)) if given else OPTIONS
    torch.manual_seed(0)  # the value head's (and LoRA's) initialisation
    return load_pi05(init, options)


def read_batch(listing: Path) -> Batch:
    return [(read_episode(p), float(r)) for p, r in json.loads(listing.read_text())]


def run_ranks(*args: str | Path, options: Pi05Options | None = None) -> None:
    """This worker on 2 CPU ranks (torchrun, gloo) with ``args`` (and π0.5 ``options``);
    AssertionError with its output when it fails."""
    env = subprocess_env(**({"PDE_TEST_PI05_OPTIONS": json.dumps(asdict(options))} if options else {}))
    proc = torchrun([__file__, *map(str, args)], env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def main() -> int:
    init, listing, out = (Path(a) for a in sys.argv[1:4])
    engine: Engine = "fsdp" if sys.argv[4:5] == ["fsdp"] else "ddp"
    resume = Path(sys.argv[5]) if len(sys.argv) > 5 else None
    ctx = init_distributed()
    loaded = CheckpointStore.load(resume) if resume is not None else None
    policy = loaded.policy if loaded is not None else load_policy(init)
    dp = DistributedPolicy(policy, ctx, engine)
    trainer = BroadcastTrainer(dp, CONFIG) if ctx.rank == 0 else DistributedTrainer(dp, CONFIG)
    if loaded is not None and loaded.trainer_state:
        trainer.load_state_dict(loaded.trainer_state)
    if isinstance(trainer, BroadcastTrainer):  # as the loop runs it: rank 0 hands the batch on
        stats = trainer.update(read_batch(listing))
        trainer.stop_followers()
        snapshot = trainer.policy_snapshot()
        torch.save({"state_dict": snapshot.state_dict(), "stats": stats}, out)
        CheckpointStore(out.parent).save(snapshot, 1, {}, trainer.state_dict())
        CheckpointStore(out.parent).path_for(1).rename(out.with_suffix(".ckpt"))
    else:
        assert follow_updates(trainer) == 1
    end_distributed(0)


if __name__ == "__main__":
    sys.exit(main())
