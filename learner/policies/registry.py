"""The policy kinds by name (LeRobot's config-by-name): ``--policy NAME`` / ``PDE_LOOP_POLICY`` pick a
row of ``POLICY_KINDS``, and a checkpoint's stored ``kind`` field finds its row to load by.

A new policy kind is its own file (a ``Policy`` subclass, usually of ``ChunkPolicy`` or
``FlowChunkPolicy``, with ``from_checkpoint_state``; ``from_init_dir`` and ``init_key`` when it starts
from a checkpoint directory instead of SFT) plus one line here. Torch-free: the CLI reads the names
for its help without importing any policy; the class is imported when one is built or loaded.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from learner.policies.choice import PolicyChoice

if TYPE_CHECKING:
    from learner.policies.base import Policy


class PolicyInitError(RuntimeError):
    """A kind's ``--init DIR`` cannot be made a policy; the message says what is missing and what to
    do (π0.5's ``Pi05CheckpointError`` is one)."""


@dataclass(frozen=True)
class PolicyKindSpec:
    """One policy kind: where its class is and how a run starts with it."""

    checkpoint_kind: str
    """The ``kind`` field its ``checkpoint_state`` stores (what existing checkpoints say)."""
    policy_class: str
    """``module:Class`` of its ``Policy``, imported only when one is built or loaded (torch)."""
    starts_from_dir: bool = False
    """True: a run starts from ``--init DIR`` (``Class.from_init_dir``), with no SFT needed first;
    False: from ``pde learner sft``'s version 0, and ``--init`` is refused."""
    about: str = ""
    """A few words for ``--policy``'s help."""

    def load_class(self) -> type[Policy]:
        module, _, name = self.policy_class.partition(":")
        cls: type[Policy] = getattr(importlib.import_module(module), name)
        return cls

    def from_checkpoint_state(self, state: dict[str, Any]) -> Policy:
        return self.load_class().from_checkpoint_state(state)

    def from_init_dir(self, choice: PolicyChoice, stats_from_demos: bool = False) -> Policy:
        """The policy of ``choice.init``; ``PolicyInitError`` says what is missing.
        ``stats_from_demos`` (SFT): a directory without normalisation statistics is accepted."""
        return self.load_class().from_init_dir(choice, stats_from_demos)

    def init_key(self, choice: PolicyChoice) -> dict[str, Any]:
        """What SFT's cache key records of the policy ``from_init_dir`` builds."""
        return self.load_class().init_key(choice)


POLICY_KINDS: dict[str, PolicyKindSpec] = {
    "small": PolicyKindSpec("small_vla", "learner.policies.vla:SmallVLAPolicy", about="the CPU policy"),
    "pi05": PolicyKindSpec("pi05", "learner.policies.pi05:Pi05Policy", True, "π0.5; needs --init DIR"),
}
DEFAULT_POLICY = "small"


def policy_kind(name: str) -> PolicyKindSpec:
    """The row of ``--policy name``; ValueError naming the known ones."""
    try:
        return POLICY_KINDS[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}: use one of {', '.join(POLICY_KINDS)}") from None


def policy_from_checkpoint_state(state: dict[str, Any]) -> Policy:
    """The policy a checkpoint stored, by its ``kind`` field."""
    kind = state.get("kind")
    for spec in POLICY_KINDS.values():
        if spec.checkpoint_kind == kind:
            return spec.from_checkpoint_state(state)
    known = ", ".join(repr(s.checkpoint_kind) for s in POLICY_KINDS.values())
    raise ValueError(f"unknown policy kind {kind!r} in checkpoint (known: {known})")
