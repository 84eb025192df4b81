"""What pyproject.toml asks of torch fits what the code imports and what the venv and images pin."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent


def _learner_torch() -> SpecifierSet:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (torch,) = (r for r in map(Requirement, extras["learner"]) if r.name == "torch")
    return torch.specifier


def test_the_learner_extra_asks_for_a_torch_with_fsdp2_in_public():
    # learner/distributed.py, which `pde learner sft` always imports, takes FSDP2 from
    # torch.distributed.fsdp: public there from torch 2.6 (pytorch#141868), before that only in
    # torch.distributed._composable.fsdp.
    source = (ROOT / "learner" / "distributed.py").read_text()
    assert "from torch.distributed.fsdp import fully_shard" in source
    spec = _learner_torch()
    assert "2.5.1" not in spec and "2.6.0" in spec


def test_the_pinned_torch_satisfies_the_learner_extra():
    pinned = (ROOT / "Makefile").read_text() + (ROOT / "docker" / "Dockerfile.gpu").read_text()
    versions = re.findall(r"torch==([0-9.]+)", pinned)
    assert versions
    assert all(v in _learner_torch() for v in versions)
