"""Policies behind one ABC (base.Policy): the small CPU policy (vla.py) and the π0.5 adapter (pi05.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # importing the package (e.g. pi05_options for the CLI) must not import torch
    from learner.policies.base import Policy


def policy_from_checkpoint_state(state: dict[str, Any]) -> Policy:
    kind = state.get("kind")
    if kind == "small_vla":
        from learner.policies.vla import SmallVLAPolicy

        return SmallVLAPolicy.from_checkpoint_state(state)
    if kind == "pi05":
        from learner.policies.pi05 import Pi05Policy

        return Pi05Policy.from_checkpoint_state(state)
    raise ValueError(f"unknown policy kind {kind!r} in checkpoint (known: 'small_vla', 'pi05')")
