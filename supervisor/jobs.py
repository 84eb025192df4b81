"""The supervisor's VLM work as typed jobs, and the queue that runs them on worker threads.

A job is a value made on the poll thread: what to ask (plain data: texts, rates, episode file
paths) and what the poll thread needs to apply the answer. Its ``run`` is the worker side, which
reads files and asks the VLM (or a proposer) but never touches the store; the service applies each
kind of result, and each kind of failure, in one handler (``SupervisorService._apply`` /
``_failed``). At most one job per ``JobKey`` is in flight.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from pde_contract.episodes import read_episode
from pde_storage import EpisodeRow
from supervisor.frames import rollout_frames
from supervisor.pool import Plan, PromptRecord, TaskHistory
from supervisor.proposers import PromptProposer, VLMProposer
from supervisor.settings import SupervisorSettings
from supervisor.vlm.base import (
    VLM,
    CandidateRequest,
    CandidateResult,
    PromptEvidence,
    RolloutFrames,
    SuccessRequest,
    SuccessResult,
    SummaryRequest,
    SummaryResult,
    VLMError,
)

log = logging.getLogger(__name__)

RolloutFile = tuple[str, bool]  # (episode file path, its authoritative label)


@dataclass(frozen=True)
class JobKey:
    """Which job this is: one in flight per key (a task's proposal, a prompt's summary, an
    episode's success proposal). Shown on the page as ``kind:subject``."""

    kind: Literal["candidates", "summary", "success"]
    subject: int | str  # task name, prompt id or episode id

    def __str__(self) -> str:
        return f"{self.kind}:{self.subject}"


@dataclass(frozen=True)
class CandidateInputs:
    """What a proposer is shown for one task's next round (frames are read on the worker)."""

    task: str
    goal: str  # the canonical prompt
    ema: float | None  # the canonical prompt's success EMA
    trend: str
    iteration: int
    n_new: int
    pool: list[tuple[PromptRecord, list[RolloutFile]]]  # best first, with the rollouts to show
    failed: list[PromptRecord]

    def request(self, s: SupervisorSettings, with_frames: bool = False) -> CandidateRequest:
        pool = []
        for rec, files in self.pool:
            rollouts = read_frames(files, s) if with_frames else []
            pool.append(PromptEvidence(rec.text, rec.success_rate, rec.n_episodes, rec.summary, rollouts))
        failed = [PromptEvidence(r.text, r.success_rate, r.n_episodes, r.summary) for r in self.failed]
        return CandidateRequest(
            self.task, self.goal, self.ema, self.trend, self.iteration, self.n_new, pool, failed
        )


@dataclass(frozen=True)
class ProposeCandidates:
    """Ask the proposer for the next round's candidates of one task."""

    history: TaskHistory
    plan: Plan
    inputs: CandidateInputs

    @property
    def key(self) -> JobKey:
        return JobKey("candidates", self.history.task)

    def run(self, proposer: PromptProposer, s: SupervisorSettings) -> CandidateResult:
        return proposer.propose(self.inputs.request(s, with_frames=isinstance(proposer, VLMProposer)))


@dataclass(frozen=True)
class SummarizePrompt:
    """Ask the VLM for a one-sentence summary of a judged prompt's rollouts."""

    task: str
    goal: str
    record: PromptRecord
    files: list[RolloutFile]

    @property
    def key(self) -> JobKey:
        return JobKey("summary", self.record.id)

    def run(self, vlm: VLM, s: SupervisorSettings) -> SummaryResult:
        rollouts = read_frames(self.files, s)
        if not rollouts:
            raise VLMError("no readable rollout frames to summarise", retryable=False)
        return vlm.summarize_rollouts(
            SummaryRequest(self.task, self.goal, self.record.text, rollouts, self.record.success_rate)
        )


@dataclass(frozen=True)
class JudgeSuccess:
    """Ask the VLM whether an episode succeeded (a proposal shown beside the operator's label)."""

    episode: EpisodeRow
    success_description: str  # from the tasks file; "" for a task it no longer lists

    @property
    def key(self) -> JobKey:
        return JobKey("success", self.episode.id)

    def run(self, vlm: VLM, s: SupervisorSettings) -> SuccessResult:
        e = self.episode
        frames = episode_frames(e.file_path, None, s)
        if frames is None:
            raise VLMError(f"no readable frames in {e.file_path}", retryable=False)
        return vlm.judge_success(
            SuccessRequest(e.task, e.canonical_prompt, e.rollout_prompt, frames, self.success_description)
        )


Job = ProposeCandidates | SummarizePrompt | JudgeSuccess
JobResult = CandidateResult | SummaryResult | SuccessResult


class JobQueue:
    """Jobs running on a thread pool, at most one per key. Only the poll thread submits and
    collects; ``in_flight`` may be read from any thread."""

    def __init__(self, workers: int) -> None:
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="vlm")
        self._inflight: dict[JobKey, tuple[Job, Future[JobResult]]] = {}

    def start(self, job: Job, run: Callable[[], JobResult]) -> None:
        """Run ``run`` (the job's worker side, its arguments bound) on a worker thread."""
        self._inflight[job.key] = (job, self._executor.submit(run))

    def finished(self) -> list[tuple[Job, Future[JobResult]]]:
        """The jobs that ended since the last call (result or exception), now out of flight."""
        done = [(key, entry) for key, entry in self._inflight.items() if entry[1].done()]
        for key, _ in done:
            del self._inflight[key]
        return [entry for _, entry in done]

    def __contains__(self, key: JobKey) -> bool:
        return key in self._inflight

    def __len__(self) -> int:
        return len(self._inflight)

    def in_flight(self) -> list[JobKey]:
        """The keys of the jobs under way; safe from any thread."""
        return list(self._inflight.copy())  # copied in one step: the poll thread mutates it

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


# --- worker side: files only, never the store -------------------------------------------------------


def episode_frames(path: str, success: bool | None, s: SupervisorSettings) -> RolloutFrames | None:
    """A rollout's sampled frames, or None (logged) when its file cannot be read."""
    try:
        ep = read_episode(path)
        return RolloutFrames(
            rollout_frames(ep, s.camera, s.frames_per_rollout, s.image_max_side_px, s.jpeg_quality), success
        )
    except (OSError, ValueError) as e:
        log.warning("cannot read frames from %s: %s", path, e)
        return None


def read_frames(files: list[RolloutFile], s: SupervisorSettings) -> list[RolloutFrames]:
    return [f for f in (episode_frames(p, ok, s) for p, ok in files) if f is not None]
