"""π0.5's sampling and training options (ours, not the checkpoint's), without torch: the CLI
reads their defaults for its help."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from learner.policies.choice import PolicyChoice

Trainable = Literal["all", "no_vision", "expert", "lora"]
TRAINABLE: tuple[Trainable, ...] = ("all", "no_vision", "expert", "lora")


@dataclass(frozen=True)
class Pi05Options:
    """Ours, not the checkpoint's: how the policy samples and trains."""

    flow_steps: int = 5
    """Denoising steps of the flow-SDE chain (PPO needs few); deterministic sampling uses the
    checkpoint's ``num_inference_steps`` (LeRobot's 10 Euler steps)."""
    noise_level: float = 0.5
    """Flow-SDE noise level a (learner/policies/flow_sde.py)."""
    bf16: bool = False
    """bfloat16 autocast for the network (weights and optimiser state stay float32)."""
    gradient_checkpointing: bool = False
    """Recompute each layer in backward: less memory, about a third more compute."""
    trainable: Trainable = "all"
    """all; no_vision (SigLIP frozen); expert (VLM frozen, as LeRobot's train_expert_only); lora."""
    lora_rank: int = 16
    """Rank of the LoRA adapters (trainable='lora')."""
    lora_alpha: float = 16.0
    """LoRA scale numerator: the adapter's output is multiplied by alpha / rank."""

    def __post_init__(self) -> None:
        if self.trainable not in ("all", "no_vision", "expert", "lora"):
            raise ValueError(f"trainable={self.trainable!r}: use all, no_vision, expert or lora")
        if self.lora_rank < 1:
            raise ValueError(f"lora_rank must be >= 1, got {self.lora_rank}")


def pi05_options(choice: PolicyChoice) -> Pi05Options:
    """The options the flags or settings give; those left None keep ``Pi05Options``' default."""
    given: dict[str, Any] = {
        "trainable": choice.pi05_trainable,
        "lora_rank": choice.pi05_lora_rank,
        "flow_steps": choice.pi05_flow_steps,
        "bf16": choice.bf16,
        "gradient_checkpointing": choice.gradient_checkpointing,
    }
    known = {f.name for f in fields(Pi05Options)}
    return Pi05Options(**{k: v for k, v in given.items() if v is not None and k in known})
