"""``--policy NAME --init DIR`` and the π0.5 options, shared by ``pde learner sft|run|eval``.

The names are the rows of ``POLICY_KINDS`` (learner/policies/registry.py). The π0.5 defaults live in
``Pi05Options`` (learner/policies/pi05_options.py); these flags only override them.
``run`` also takes them as settings of the same names (``PDE_LOOP_POLICY``, ``PDE_LOOP_INIT``, ...;
learner/loop/settings.py), which the flags override.
Nothing heavy is imported until a policy is built.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from learner.policies.choice import PolicyChoice
from learner.policies.pi05_options import TRAINABLE, Pi05Options, pi05_options
from learner.policies.registry import DEFAULT_POLICY, POLICY_KINDS, policy_kind

if TYPE_CHECKING:
    import torch

    from learner.policies.base import Policy

__all__ = ["PolicyChoice", "add_policy_args", "check_policy_args", "load_init_policy", "pi05_options"]


def add_policy_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("policy")
    kinds = "; ".join(f"{name}: {spec.about}" for name, spec in POLICY_KINDS.items())
    g.add_argument(
        "--policy",
        choices=tuple(POLICY_KINDS),
        default=DEFAULT_POLICY,
        help=f"{kinds} (default {DEFAULT_POLICY})",
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
    try:
        spec = policy_kind(args.policy)
    except ValueError as e:
        return f"{policy}: {e}"
    if spec.starts_from_dir and not args.init:
        return f"{policy} {args.policy} needs {init} DIR (a checkpoint directory; see docs/pi05.md)"
    if not spec.starts_from_dir and args.init:
        dirs = " or ".join(n for n, s in POLICY_KINDS.items() if s.starts_from_dir)
        return f"{init} is for {policy} {dirs}; the {args.policy} policy starts from `pde learner sft`"
    return None


def load_init_policy(
    args: PolicyChoice, device: torch.device | str = "cpu", stats_from_demos: bool = False
) -> Policy:
    """The policy of ``--init DIR`` on ``device``; PolicyInitError says what is missing.
    ``stats_from_demos`` (SFT): a directory without normalisation statistics is accepted."""
    return policy_kind(args.policy).from_init_dir(args, stats_from_demos).to(device)
