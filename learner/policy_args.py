"""``--policy small|pi05 --init DIR`` and the π0.5 options, shared by ``pde learner sft|run|eval``.

The defaults live in ``Pi05Options`` (learner/policies/pi05.py); these flags only override them.
``run`` also takes them as settings of the same names (``PDE_LOOP_POLICY``, ``PDE_LOOP_INIT``, ...;
learner/loop/settings.py), which the flags override.
Nothing heavy is imported until a π0.5 policy is asked for.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from learner.policies.pi05_options import TRAINABLE, Pi05Options, Trainable

if TYPE_CHECKING:
    import torch

    from learner.policies.pi05 import Pi05Policy

PolicyKind = Literal["small", "pi05"]
POLICIES: tuple[PolicyKind, ...] = get_args(PolicyKind)
DEFAULT_POLICY: PolicyKind = "small"


class PolicyChoice(Protocol):
    """What the flags below give (an ``argparse.Namespace``), or settings with the same names
    (``learner.loop.settings.LoopSettings``); None: ``Pi05Options``' default."""

    policy: PolicyKind
    init: str
    pi05_trainable: Trainable | None
    pi05_lora_rank: int | None
    pi05_flow_steps: int | None
    bf16: bool | None
    gradient_checkpointing: bool | None


def add_policy_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("policy")
    g.add_argument(
        "--policy",
        choices=POLICIES,
        default=DEFAULT_POLICY,
        help=f"small (the CPU policy) or pi05 (needs --init; default {DEFAULT_POLICY})",
    )
    g.add_argument(
        "--init",
        default="",
        metavar="DIR",
        help="π0.5 checkpoint directory: LeRobot's (config.json, model.safetensors, normaliser "
        "statistics) or openpi's converted one, plus tokenizer.json; see docs/pi05.md",
    )
    d = Pi05Options()
    g.add_argument("--pi05-trainable", choices=TRAINABLE, help=f"what trains (default: {d.trainable})")
    g.add_argument(
        "--pi05-lora-rank", type=int, help=f"LoRA rank with --pi05-trainable lora (default {d.lora_rank})"
    )
    g.add_argument("--pi05-flow-steps", type=int, help=f"flow-SDE denoising steps (default {d.flow_steps})")
    g.add_argument("--bf16", action="store_true", default=None, help="π0.5 under bfloat16 autocast")
    g.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        default=None,
        help="π0.5: recompute layers in backward",
    )


def check_policy_args(args: PolicyChoice, env_prefix: str = "") -> str | None:
    """A message when the flags do not fit together, else None. ``env_prefix``: the settings
    prefix (``PDE_LOOP_``) where the values may come from the environment too."""
    policy, init = "--policy", "--init"
    if env_prefix:
        policy, init = f"{policy} ({env_prefix}POLICY)", f"{init} ({env_prefix}INIT)"
    if args.policy == "pi05" and not args.init:
        return f"{policy} pi05 needs {init} DIR (a π0.5 checkpoint directory; see docs/pi05.md)"
    if args.policy == "small" and args.init:
        return f"{init} is for {policy} pi05; the small policy starts from `pde learner sft`"
    return None


def pi05_options(args: PolicyChoice) -> Pi05Options:
    given: dict[str, Any] = {
        "trainable": args.pi05_trainable,
        "lora_rank": args.pi05_lora_rank,
        "flow_steps": args.pi05_flow_steps,
        "bf16": args.bf16,
        "gradient_checkpointing": args.gradient_checkpointing,
    }
    known = {f.name for f in fields(Pi05Options)}
    return Pi05Options(**{k: v for k, v in given.items() if v is not None and k in known})


def load_init_policy(
    args: PolicyChoice, device: torch.device | str = "cpu", stats_from_demos: bool = False
) -> Pi05Policy:
    """The π0.5 policy of ``--init DIR`` on ``device``; Pi05CheckpointError says what is missing.
    ``stats_from_demos`` (SFT): a directory without normalisation statistics is accepted."""
    from learner.policies.pi05 import load_pi05

    policy = load_pi05(args.init, pi05_options(args), stats_from_demos)
    return policy.to(device)
