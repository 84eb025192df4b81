"""Plain immutable rows handed out by the Store (never live ORM objects, so callers cannot
mutate the database by accident or trip over expired sessions). A column that holds one of a few
words is read as its ``pde_contract.records`` enum (``repos.base.stored``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic

from pde_contract.intents import IntentT
from pde_contract.records import EpisodeStatus, LabelSource, PromptSource, PromptStatus, Stage

# An episode in play: its policy version is in use (the actor's, or one whose rollout awaits a label).
IN_PLAY_STATUSES = (EpisodeStatus.RUNNING, EpisodeStatus.AWAITING_LABEL)
# Statuses an episode can be discarded from (a running one is aborted first).
DISCARDABLE_STATUSES = (EpisodeStatus.AWAITING_LABEL, EpisodeStatus.LABELLED, EpisodeStatus.ABORTED)
# The canonical prompt's success curve is a moving rate over this many labelled episodes (the loop
# records it; the page recomputes it from the labels, so a relabel moves the curve).
CANONICAL_SUCCESS_WINDOW = 20
# Operator and simulator labels decide the reward; a VLM label is only shown as a proposal.
AUTHORITATIVE_SOURCES = (LabelSource.OPERATOR, LabelSource.SIMULATOR)


@dataclass(frozen=True)
class TaskRow:
    id: int
    name: str
    canonical_prompt: str
    created_at: datetime


@dataclass(frozen=True)
class TaskState:
    task: str
    stage: Stage
    iteration: int
    alpha: float
    ema_success: float | None
    updated_at: datetime
    rollouts_per_prompt: int | None = None  # N, as the episode loop last wrote it (None: not yet)


@dataclass(frozen=True)
class PromptRow:
    id: int
    task: str
    text: str
    status: PromptStatus
    source: PromptSource
    iteration: int
    summary: str
    # The n_* counts are over the episodes of the stage the reader asked for (TaskRepository.prompts),
    # every stage by default.
    n_episodes: int  # episodes with an authoritative label
    n_success: int
    n_finished: int  # episodes that ended (labelled or awaiting a label)
    created_at: datetime
    n_interventions: int = 0  # a person's takeovers over the finished episodes
    n_intervened: int = 0  # finished episodes with at least one takeover

    @property
    def success_rate(self) -> float | None:
        return self.n_success / self.n_episodes if self.n_episodes else None


@dataclass(frozen=True)
class EpisodeRow:
    id: int
    task: str
    rollout_prompt: str
    canonical_prompt: str
    prompt_id: int
    policy_version: int
    stage: Stage
    status: EpisodeStatus
    success: bool | None  # latest operator/simulator label
    vlm_proposal: bool | None  # latest VLM label, a proposal only
    vlm_reason: str
    file_path: str  # absolute; "" until the episode ends
    video_paths: dict[str, str]  # camera -> absolute mp4 path
    created_at: datetime
    finished_at: datetime | None
    labelled_at: datetime | None
    abort_reason: str
    seed: int | None
    n_chunks: int
    discarded_at: datetime | None = None
    discard_reason: str = ""
    note: str = ""
    n_interventions: int = 0  # a person's takeovers during the episode (EpisodeFile.interventions)
    n_person_rows: int = 0  # rows the person commanded (left out of PPO's ratio)


@dataclass(frozen=True)
class LabelRow:
    id: int
    episode_id: int
    success: bool
    source: LabelSource
    reason: str
    created_at: datetime
    operator: str = ""  # who gave an operator label ("" for the simulator, the VLM, older labels)

    @property
    def authoritative(self) -> bool:
        return self.source in AUTHORITATIVE_SOURCES


@dataclass(frozen=True)
class ChunkInfo:
    episode_id: int
    index: int
    observation_time_s: float
    n_steps: int
    inference_s: float | None
    sent_time_s: float | None


@dataclass(frozen=True)
class CheckpointRow:
    version: int
    path: str
    metrics: dict[str, Any]
    created_at: datetime
    pruned_at: datetime | None = None  # the file was removed (the loop's retention); None: it is kept
    # the newest episode the PPO update to this version trained on; None: none did (an SFT policy)
    trained_through_episode_id: int | None = None


@dataclass(frozen=True)
class SupervisorCallRow:
    id: int
    kind: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float
    ok: bool
    error: str
    created_at: datetime


@dataclass(frozen=True)
class IntentRow(Generic[IntentT]):
    """A stored intent, read as its message (pde_contract.intents)."""

    id: int
    intent: IntentT
    created_at: datetime
    consumed_at: datetime | None = None


@dataclass(frozen=True)
class FailedIntentRow:
    """A stored intent no reader could take, and why (an unknown kind, a malformed payload)."""

    id: int
    kind: str
    payload: dict[str, Any]
    error: str
    created_at: datetime


@dataclass(frozen=True)
class ServiceStateRow:
    name: str
    state: dict[str, Any]
    updated_at: datetime
