"""What picks and configures a policy (the ``--policy`` flags or the loop's settings of the same names),
without torch: the registry, the CLI and each policy kind's ``from_init_dir`` read it."""

from __future__ import annotations

from typing import Protocol

from learner.policies.pi05_options import Trainable


class PolicyChoice(Protocol):
    """What the policy flags give (an ``argparse.Namespace``, learner/policy_args.py), or settings
    with the same names (``learner.loop.settings.LoopSettings``); None: the kind's default."""

    policy: str
    init: str
    pi05_trainable: Trainable | None
    pi05_lora_rank: int | None
    pi05_flow_steps: int | None
    bf16: bool | None
    gradient_checkpointing: bool | None
