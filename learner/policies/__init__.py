"""Policies behind one ABC (base.Policy): the small CPU policy (vla.py) and the π0.5 adapter (pi05.py),
chosen by name in registry.py."""

from __future__ import annotations

from learner.policies.registry import policy_from_checkpoint_state

__all__ = ["policy_from_checkpoint_state"]
