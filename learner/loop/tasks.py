"""Task names and canonical prompts for the loop (the catalogue lives in pde_contract.tasks)."""

from __future__ import annotations

from pde_contract.tasks import HEADLINE_TASKS, PAPER_TASKS, TaskCatalogue, load_tasks

__all__ = ["HEADLINE_TASKS", "PAPER_TASKS", "canonical_prompt"]


def canonical_prompt(task: str, catalogue: TaskCatalogue | None = None) -> str:
    """``task``'s canonical prompt in ``catalogue`` (default: the paper's ten); UnknownTaskError
    (a ValueError) lists the known tasks."""
    return (catalogue or load_tasks(None)).get(task).prompt
