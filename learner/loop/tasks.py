"""Task names and canonical prompts for the loop (the table lives in pde_contract.tasks)."""

from __future__ import annotations

from pde_contract.tasks import HEADLINE_TASKS, PAPER_TASKS

__all__ = ["HEADLINE_TASKS", "PAPER_TASKS", "canonical_prompt"]


def canonical_prompt(task: str) -> str:
    try:
        return PAPER_TASKS[task]
    except KeyError:
        raise ValueError(f"unknown task {task!r}; valid tasks: {', '.join(PAPER_TASKS)}") from None
