"""Narrow, typed views of ``Store`` for the services that use only part of it: a service states
what it reads and writes, and mypy checks both the service and ``Store`` against that.

Role protocols, grouped by aggregate (``pde_storage.repos``):

- tasks: ``TaskReader`` (tasks, prompts, state), ``TaskStateWriter``, ``PromptWriter``;
- episodes: ``EpisodeReader``, ``EpisodeRecorder`` (the loop's running episodes), ``Labeller``,
  ``EpisodeCurator`` (discard, restore, notes), ``PolicyVersionsInUse``;
- telemetry: ``MetricWriter``, ``MetricReader``, ``CheckpointReader``, ``CheckpointLog``,
  ``SupervisorCallLog``;
- messages: ``IntentSender``, ``IntentConsumer``, ``ServiceStates``.

Each service's view is the union of the roles it plays: ``LoopStore`` (``pde loop``),
``CheckpointRetentionStore`` (``pde loop``'s checkpoints), ``SupervisorStore`` (``pde supervisor``),
``OperatorStore`` (the operator page). The signatures are ``Store``'s own, defaults included
(tests/storage/test_protocols.py compares them)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pde_contract.episodes import EpisodeFile
from pde_contract.intents import IntentT
from pde_storage.rows import (
    CheckpointRow,
    ChunkInfo,
    EpisodeRow,
    FailedIntentRow,
    IntentRow,
    LabelRow,
    PromptRow,
    ServiceStateRow,
    SupervisorCallRow,
    TaskRow,
    TaskState,
)

# --- tasks, prompts, task state -----------------------------------------------------------------


@runtime_checkable
class TaskReader(Protocol):
    def tasks(self) -> list[TaskRow]: ...
    def task_state(self, task: str) -> TaskState: ...
    def prompts(
        self, task: str, status: str | Iterable[str] | None = None, stage: str | None = None
    ) -> list[PromptRow]: ...
    def prompt(self, prompt_id: int) -> PromptRow: ...


@runtime_checkable
class TaskStateWriter(Protocol):
    def ensure_task(self, name: str, canonical_prompt: str) -> TaskRow: ...
    def set_task_state(self, task: str, **fields: Any) -> TaskState: ...


@runtime_checkable
class PromptWriter(Protocol):
    def add_prompt(
        self, task: str, text: str, status: str = "candidate", source: str = "vlm", iteration: int = 0
    ) -> PromptRow: ...
    def set_prompt_status(self, prompt_id: int, status: str, summary: str = "") -> PromptRow: ...
    def set_prompt_summary(self, prompt_id: int, summary: str) -> PromptRow: ...


# --- episodes, labels, episode files ------------------------------------------------------------


@runtime_checkable
class EpisodeReader(Protocol):
    def episode(self, episode_id: int) -> EpisodeRow: ...
    def episodes(
        self,
        task: str | None = None,
        status: str | Iterable[str] | None = None,
        since_id: int = 0,
        limit: int | None = None,
        newest_first: bool = False,
        prompt_id: int | None = None,
        *,
        before_id: int | None = None,
        stage: str | None = None,
        success: bool | None = None,
        unlabelled: bool = False,
    ) -> list[EpisodeRow]: ...
    def count_episodes(self, task: str | None = None, status: str | None = None) -> int: ...
    def labels(self, episode_id: int) -> list[LabelRow]: ...
    def chunks(self, episode_id: int) -> list[ChunkInfo]: ...
    def load_episode_file(self, episode_id: int) -> EpisodeFile: ...


@runtime_checkable
class EpisodeRecorder(Protocol):
    def create_episode(
        self, task: str, rollout_prompt_id: int, policy_version: int, stage: str, seed: int | None = None
    ) -> EpisodeRow: ...
    def encode_episode_videos(self, episode_id: int, episode_file: EpisodeFile) -> dict[str, Path]: ...
    def finish_episode(
        self, episode_id: int, episode_file: EpisodeFile, *, videos: Mapping[str, Path] | None = None
    ) -> EpisodeRow: ...
    def abort_episode(self, episode_id: int, reason: str) -> EpisodeRow: ...
    def abort_running_episodes(self, reason: str) -> list[int]: ...


@runtime_checkable
class PolicyVersionsInUse(Protocol):
    def policy_versions_in_use(self) -> set[int]: ...


@runtime_checkable
class Labeller(Protocol):
    def add_label(
        self,
        episode_id: int,
        success: bool,
        source: str = "operator",
        reason: str = "",
        *,
        relabel: bool = False,
        operator: str = "",
    ) -> LabelRow: ...


@runtime_checkable
class EpisodeCurator(Protocol):
    def discard_episode(self, episode_id: int, reason: str) -> EpisodeRow: ...
    def restore_episode(self, episode_id: int) -> EpisodeRow: ...
    def set_episode_note(self, episode_id: int, note: str) -> EpisodeRow: ...


# --- telemetry ----------------------------------------------------------------------------------


@runtime_checkable
class MetricWriter(Protocol):
    def add_metric(self, name: str, value: float, step: int) -> None: ...


@runtime_checkable
class MetricReader(Protocol):
    def metrics(self, name: str) -> list[tuple[int, float, datetime]]: ...
    def metric_names(self) -> list[str]: ...


@runtime_checkable
class CheckpointReader(Protocol):
    def checkpoints(self) -> list[CheckpointRow]: ...


@runtime_checkable
class CheckpointLog(CheckpointReader, Protocol):
    def add_checkpoint(
        self,
        version: int,
        path: str | Path,
        metrics: dict[str, Any] | None = None,
        trained_through_episode_id: int | None = None,
    ) -> CheckpointRow: ...
    def latest_checkpoint(self) -> CheckpointRow | None: ...
    def mark_checkpoint_pruned(self, version: int) -> CheckpointRow: ...


@runtime_checkable
class SupervisorCallLog(Protocol):
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
    def supervisor_calls(self, limit: int = 100) -> list[SupervisorCallRow]: ...


# --- messages between the services: intents and service states ----------------------------------


@runtime_checkable
class IntentSender(Protocol):
    def add_intent(self, intent: IntentT) -> IntentRow[IntentT]: ...
    def pending_intents(self, kind: type[IntentT]) -> list[IntentRow[IntentT]]: ...


@runtime_checkable
class IntentConsumer(Protocol):
    def pending_intents(self, kind: type[IntentT]) -> list[IntentRow[IntentT]]: ...
    def take_intent(self, kind: type[IntentT]) -> IntentRow[IntentT] | None: ...
    def discard_intents(self, kind: type[IntentT]) -> int: ...
    def fail_unknown_intents(self) -> list[FailedIntentRow]: ...
    def failed_intents(self, limit: int = 100) -> list[FailedIntentRow]: ...


@runtime_checkable
class ServiceStates(Protocol):
    def set_service_state(self, name: str, state: dict[str, Any]) -> None: ...
    def service_states(self) -> dict[str, ServiceStateRow]: ...


# --- the services' views ------------------------------------------------------------------------


@runtime_checkable
class LoopStore(
    TaskReader,
    TaskStateWriter,
    EpisodeReader,
    EpisodeRecorder,
    Labeller,
    MetricWriter,
    IntentConsumer,
    ServiceStates,
    Protocol,
):
    """What ``pde loop``'s episode loop uses: it creates the tasks and moves their state (its N
    on the task row, by which the supervisor judges candidates), runs and records episodes,
    labels them in simulation (the simulator's check), logs metrics, takes the page's
    Start/Abort, and reports its phase. (Its service opens the full ``Store``, which also
    records the checkpoints.)"""


@runtime_checkable
class CheckpointRetentionStore(CheckpointLog, PolicyVersionsInUse, Protocol):
    """What ``pde loop``'s checkpoint keeper uses (learner/loop/retention.py): it registers each
    version, asks which versions episodes in play still use, and marks the versions whose files
    it removed."""


@runtime_checkable
class SupervisorStore(
    TaskReader,
    TaskStateWriter,
    PromptWriter,
    EpisodeReader,
    Labeller,
    SupervisorCallLog,
    MetricWriter,
    ServiceStates,
    Protocol,
):
    """What ``pde supervisor`` uses: tasks and prompts (it judges and proposes), episodes and
    labels (its evidence; its own labels are proposals), its calls, metrics and heartbeat."""


@runtime_checkable
class OperatorStore(
    TaskReader,
    PromptWriter,
    EpisodeReader,
    Labeller,
    EpisodeCurator,
    MetricReader,
    CheckpointReader,
    IntentSender,
    ServiceStates,
    Protocol,
):
    """What the operator page uses: everything it shows (the checkpoints: which labels PPO
    already used, update markers on the curves), the operator's labels, discards and notes,
    prompt decisions, Start/Abort as intents and the run control as a service state."""

    @property
    def dialect(self) -> str: ...
