"""Narrow, typed views of ``Store`` for the services that use only part of it: a service states
what it reads and writes, and mypy checks both the service and ``Store`` against that."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from pde_storage.rows import (
    EpisodeRow,
    IntentRow,
    LabelRow,
    PromptRow,
    SupervisorCallRow,
    TaskRow,
    TaskState,
)


class SupervisorStore(Protocol):
    """What ``pde supervisor`` uses: tasks and prompts (it judges and proposes), episodes and
    labels (its evidence; its own labels are proposals), its calls, metrics and heartbeat, and the
    loop's reports."""

    def tasks(self) -> list[TaskRow]: ...
    def task_state(self, task: str) -> TaskState: ...
    def set_task_state(self, task: str, **fields: Any) -> TaskState: ...
    def prompts(self, task: str, status: str | Iterable[str] | None = None) -> list[PromptRow]: ...
    def add_prompt(
        self, task: str, text: str, status: str = ..., source: str = ..., iteration: int = ...
    ) -> PromptRow: ...
    def set_prompt_status(self, prompt_id: int, status: str, summary: str = "") -> PromptRow: ...
    def set_prompt_summary(self, prompt_id: int, summary: str) -> PromptRow: ...
    def episodes(
        self,
        task: str | None = None,
        status: str | Iterable[str] | None = None,
        since_id: int = 0,
        limit: int | None = None,
    ) -> list[EpisodeRow]: ...
    def add_label(self, episode_id: int, success: bool, source: str = ..., reason: str = "") -> LabelRow: ...
    def record_supervisor_call(
        self,
        kind: str,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float,
        latency_s: float,
        ok: bool,
        error: str = "",
    ) -> SupervisorCallRow: ...
    def set_service_state(self, name: str, state: dict[str, Any]) -> None: ...
    def add_metric(self, name: str, value: float, step: int) -> None: ...
    def take_intent(self, kind: str) -> IntentRow | None: ...
