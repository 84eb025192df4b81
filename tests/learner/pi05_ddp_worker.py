"""One PPO update of the tiny π0.5 under DDP, one torchrun process per rank (run by
tests/learner/test_pi05_ddp.py): ``python -m torch.distributed.run ... pi05_ddp_worker.py INIT BATCH OUT``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from learner.distributed import BroadcastTrainer, DistributedPolicy, follow_updates, init_distributed
from learner.policies.base import Policy
from learner.policies.pi05 import Pi05Options, load_pi05
from learner.ppo import PPOConfig
from learner.trainer import Batch, Trainer
from pde_contract.episodes import read_episode

OPTIONS = Pi05Options(flow_steps=2)
# 3-row minibatches over 2 ranks: uneven shares (2 + 1 padded) are part of what is tested.
CONFIG = PPOConfig(minibatch_size=3, update_epochs=2, learning_rate=1e-3, seed=0)


def load_policy(init_dir: Path) -> Policy:
    torch.manual_seed(0)  # the value head's initialisation
    return load_pi05(init_dir, OPTIONS)


def read_batch(listing: Path) -> Batch:
    return [(read_episode(p), float(r)) for p, r in json.loads(listing.read_text())]


def main() -> int:
    init_dir, listing, out = (Path(a) for a in sys.argv[1:4])
    ctx = init_distributed()
    policy = load_policy(init_dir)
    if ctx.rank == 0:  # as the loop runs it: rank 0 reads the batch and hands it to the others
        trainer = BroadcastTrainer(DistributedPolicy(policy, ctx), CONFIG)
        stats = trainer.update(read_batch(listing))
        trainer.stop_followers()
        torch.save({"state_dict": policy.state_dict(), "stats": stats}, out)
    else:
        assert follow_updates(Trainer(DistributedPolicy(policy, ctx), CONFIG)) == 1
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
