"""``pde supervisor`` as a service: poll the database, hand VLM work to threads, write results back.

The robot and the operator never wait on the supervisor: it is a separate process that only reads
episodes and writes proposals, and inside it every VLM request runs on a worker thread while the
poll loop keeps going. Only the poll thread touches the store; workers get plain data (file
paths, texts) and return plain results: the jobs and their queue are in ``supervisor.jobs``.

When the VLM fails ``max_consecutive_failures`` times in a row the service stops asking it for
``cooldown_s`` and falls back: candidates come from the offline paraphraser (or none, leaving the
learner on the canonical prompt), summaries become a count of outcomes, success proposals wait.
Nothing already stored is ever deleted or overwritten by a failure.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, assert_never

from pde_contract.records import EpisodeStatus, LabelSource, PromptStatus, Stage
from pde_contract.service_state import SupervisorPhase, SupervisorState
from pde_contract.tasks import load_tasks
from pde_storage import EpisodeRow
from pde_storage.heartbeat import Heartbeat
from pde_storage.protocols import SupervisorStore
from pde_storage.service_states import write_state
from supervisor.dedup import DuplicateFilter, Embedder
from supervisor.jobs import (
    CandidateInputs,
    Job,
    JobKey,
    JobQueue,
    JobResult,
    JudgeSuccess,
    ProposeCandidates,
    RolloutFile,
    SummarizePrompt,
)
from supervisor.pool import BootstrapConfig, Plan, PromptRecord, TaskHistory, plan
from supervisor.proposers import PromptProposer, RandomParaphraseProposer, VLMProposer
from supervisor.scoring import confusion
from supervisor.settings import SupervisorSettings
from supervisor.vlm.base import VLM, CallRecord, CandidateResult, SuccessResult, SummaryResult, VLMError

log = logging.getLogger(__name__)

SERVICE_NAME = "supervisor"
JOB_FAILURES_BEFORE_GIVING_UP = 3  # per episode, for success proposals
PUBLISH_S = 5.0  # how often the confusion matrix is recomputed from all episodes
TREND_WINDOW = 5  # canonical-prompt rollouts per window when comparing recent and earlier success


class VLMHealth:
    """Consecutive-failure breaker: after N failures in a row, stay on the fallback for a while."""

    def __init__(
        self, max_failures: int, cooldown_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_failures = max_failures
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.failures = 0
        self.open_until = 0.0
        self.last_error = ""

    @property
    def available(self) -> bool:
        return self.clock() >= self.open_until

    def success(self) -> None:
        self.failures = 0

    def failure(self, error: str) -> None:
        self.failures += 1
        self.last_error = error
        if self.failures >= self.max_failures:
            self.open_until = self.clock() + self.cooldown_s
            self.failures = 0
            log.warning(
                "VLM failed %d times in a row (%s); using the fallback for %.0fs",
                self.max_failures,
                error,
                self.cooldown_s,
            )


class SupervisorService:
    def __init__(
        self,
        store: SupervisorStore,
        settings: SupervisorSettings,
        vlm: VLM | None,
        embedder: Embedder | None,
        *,
        seed: int | None = None,
        proposer: PromptProposer | None = None,
    ) -> None:
        """``proposer``: where candidates come from instead of ``settings.proposer`` (a named
        proposer of supervisor.proposers.PROPOSERS in a benchmark); None: the settings' choice."""
        self.store = store
        self.settings = settings
        self.vlm = vlm
        self.cfg = BootstrapConfig(
            iterations_t0=settings.iterations_t0,
            candidates_k=settings.candidates_k,
            eta=settings.eta,
            pool_min_m=settings.pool_min_m,
        )
        # The success description each proposal judges against (tasks file, PDE_TASKS_FILE).
        self.catalogue = load_tasks(settings.tasks_file)
        self.dedup = DuplicateFilter(embedder, settings.duplicate_cosine)
        self.offline = RandomParaphraseProposer(seed if seed is not None else random.randrange(1 << 30))
        self.proposer: PromptProposer = proposer or (
            VLMProposer(vlm) if vlm is not None and settings.proposer == "vlm" else self.offline
        )
        self.health = VLMHealth(settings.max_consecutive_failures, settings.cooldown_s)
        self.jobs = JobQueue(settings.workers)
        self._calls: list[CallRecord] = []
        self._calls_lock = threading.Lock()
        self._gave_up: set[JobKey] = set()  # success proposals not asked again
        self._job_failures: dict[JobKey, int] = {}
        self.counters = {"polls": 0, "vlm_ok": 0, "vlm_failed": 0, "fallbacks": 0, "errors": 0}
        self.last_analysis: dict[str, str] = {}
        self._labelled_watermark = 0  # labelled episodes up to this id need no success proposal
        self._next_publish = 0.0
        self._publish_lock = threading.Lock()
        self._last_publish = float("-inf")
        self._poll_started = self._poll_ended = 0.0
        self._confusion: dict[str, Any] = {}
        if vlm is not None:
            vlm.set_call_sink(self._on_call)  # every call is stored, from any worker thread

    # --- lifecycle ------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        log.info(
            "supervisor polling every %.1fs (proposer: %s)",
            self.settings.poll_interval_s,
            self.proposer.source,
        )
        # The heartbeat has its own thread: a poll that waits (the sentence model still loading on a
        # loaded machine, a slow database) must not make a live service look dead to its healthcheck.
        beat = Heartbeat(
            "supervisor heartbeat", self.settings.heartbeat_period_s, self._beat, join_timeout_s=10.0
        )
        beat.start()
        try:
            while not stop.is_set():
                try:
                    self.step()
                except Exception:  # a bad row or a database hiccup must not end the service
                    self.counters["errors"] += 1
                    log.exception("supervisor poll failed; trying again next poll")
                stop.wait(self.settings.poll_interval_s)
        finally:
            beat.stop()
        self.close()
        try:
            self.publish(force=True, phase="stopped")  # `pde health supervisor` then says so
        except Exception:
            log.exception("could not record the supervisor's stop")

    def _beat(self) -> None:
        if time.monotonic() - self._last_publish < self.settings.heartbeat_period_s:
            return  # a poll just published: one write per period is enough
        self.publish()

    def close(self) -> None:
        self.jobs.close()

    def idle(self) -> bool:
        return not self.jobs

    # --- one poll ---------------------------------------------------------------------------------

    def step(self) -> None:
        self.counters["polls"] += 1
        self._poll_started = time.time()
        try:
            self._collect()
            self._flush_calls()
            for task, canonical in self._tasks():
                try:
                    self._step_task(task, canonical)
                except Exception:  # one task's bad row must not stall the others
                    self.counters["errors"] += 1
                    log.exception("task %s: poll failed; trying again next poll", task)
            if self.settings.score_episodes and self.vlm is not None:
                self._submit_success_proposals()
        finally:
            self._poll_ended = time.time()
            self.publish()  # also after a failed poll

    def _tasks(self) -> list[tuple[str, str]]:
        rows = [(t.name, t.canonical_prompt) for t in self.store.tasks()]
        wanted = set(self.settings.tasks)
        return [r for r in rows if not wanted or r[0] in wanted]

    def load_history(self, task: str, canonical: str) -> tuple[TaskHistory, list[EpisodeRow]]:
        state = self.store.task_state(task)
        # Counted by the store over the bootstrap stage (the policy was frozen while prompts were
        # compared), as the page counts them.
        records = [
            PromptRecord(p.id, p.text, p.status, p.iteration, p.n_episodes, p.n_success, p.summary)
            for p in self.store.prompts(task, stage=Stage.BOOTSTRAP)
            if p.status != PromptStatus.CANONICAL
        ]
        # A discarded episode (a bad reset, someone in the scene) is no evidence to show the VLM.
        episodes = [e for e in self.store.episodes(task=task) if e.status != EpisodeStatus.DISCARDED]
        return TaskHistory(task, canonical, records, state.stage, state.iteration), episodes

    def _step_task(self, task: str, canonical: str) -> None:
        state = self.store.task_state(task)
        if state.stage == Stage.RL:
            return  # pool frozen: nothing to judge or propose, no need to read the history
        history, episodes = self.load_history(task, canonical)
        # N is the loop's, read from the task row where the loop writes it.
        cfg = dataclasses.replace(self.cfg, rollouts_n=state.rollouts_per_prompt)
        p = plan(history, cfg)
        for record, verdict in p.verdicts:
            log.info(
                "task %s: prompt #%d %r -> %s (%d/%d successes)",
                task,
                record.id,
                record.text,
                verdict,
                record.n_success,
                record.n_episodes,
            )
            self.store.set_prompt_status(record.id, verdict)
            record.status = verdict
        self._submit_summaries(history, episodes)
        if p.action == "enter_rl":
            log.info("task %s: entering RL, pool frozen: %s", task, p.reason)
            self.store.set_task_state(task, stage=Stage.RL)
        elif p.action == "propose" and JobKey("candidates", task) not in self.jobs:
            self._start_proposal(history, episodes, p)

    # --- candidates -------------------------------------------------------------------------------

    def _start_proposal(self, history: TaskHistory, episodes: list[EpisodeRow], p: Plan) -> None:
        job = ProposeCandidates(
            history, p, self._candidate_inputs(history, episodes, p.n_new, p.next_iteration)
        )
        if isinstance(self.proposer, VLMProposer) and not self.health.available:
            self._fallback_proposal(job, "VLM unavailable: " + self.health.last_error)
            return
        self.jobs.start(job, partial(job.run, self.proposer, self.settings))

    def _candidate_inputs(
        self, h: TaskHistory, episodes: list[EpisodeRow], n_new: int, iteration: int
    ) -> CandidateInputs:
        """Plain data for the worker: texts, rates and the episode files whose frames it should send."""
        s = self.settings
        budget = s.max_images_per_request // s.frames_per_rollout  # rollouts with frames
        labelled = [e for e in episodes if e.success is not None and e.file_path]
        pool: list[tuple[PromptRecord, list[RolloutFile]]] = []
        # Best prompts first; prompts at 100% need no refinement, so they get no frames.
        for rec in sorted(h.pool, key=lambda r: -(r.success_rate or 0.0)):
            files: list[RolloutFile] = []
            if budget > 0 and (rec.success_rate or 0.0) < 1.0:
                mine = [e for e in labelled if e.prompt_id == rec.id]
                pick = _pick_rollouts(mine, 1)
                files = [(e.file_path, bool(e.success)) for e in pick]
                budget -= len(files)
            pool.append((rec, files))
        canon = [e for e in labelled if e.rollout_prompt == h.canonical]
        state = self.store.task_state(h.task)
        ema = state.ema_success if state.ema_success is not None else _rate([e.success for e in canon])
        trend = _trend([bool(e.success) for e in canon])
        return CandidateInputs(h.task, h.canonical, ema, trend, iteration, n_new, pool, list(h.failed))

    def _apply_proposal(self, history: TaskHistory, p: Plan, result: CandidateResult) -> None:
        fresh, _ = self.load_history(history.task, history.canonical)  # the store may have moved on
        if fresh.stage != Stage.BOOTSTRAP or fresh.iteration >= p.next_iteration:
            log.info(
                "task %s: proposal for iteration %d arrived too late; dropped", history.task, p.next_iteration
            )
            return
        screened = self.dedup.screen(result.new_prompts, fresh.known_texts())
        for text, why in screened.refused:
            log.info("task %s: refused candidate %r: %s", history.task, text, why)
        for text in screened.accepted[: p.n_new]:
            self.store.add_prompt(
                history.task,
                text,
                status=PromptStatus.CANDIDATE,
                source=result.source,
                iteration=p.next_iteration,
            )
        by_text = {r.text: r for r in fresh.prompts}
        for text, line in result.summaries.items():
            rec = by_text.get(" ".join(text.split()))
            if rec is not None and not rec.summary:
                self.store.set_prompt_summary(rec.id, line)
        self.last_analysis[history.task] = result.analysis
        if result.analysis:
            log.info("task %s: supervisor analysis: %s", history.task, result.analysis)
        # A round that produced only duplicates still spends one iteration: the budget stays finite.
        self.store.set_task_state(history.task, iteration=p.next_iteration)
        log.info(
            "task %s: iteration %d, %d new candidate(s) from %s (%d refused)",
            history.task,
            p.next_iteration,
            len(screened.accepted[: p.n_new]),
            result.source,
            len(screened.refused),
        )

    def _fallback_proposal(self, job: ProposeCandidates, why: str) -> None:
        history, p = job.history, job.plan
        self.counters["fallbacks"] += 1
        if self.settings.fallback == "canonical":
            log.warning(
                "task %s: %s; no candidates this iteration, the canonical prompt stays", history.task, why
            )
            self.store.set_task_state(history.task, iteration=p.next_iteration)
            return
        log.warning("task %s: %s; offline paraphrases instead", history.task, why)
        self._apply_proposal(history, p, self.offline.propose(job.inputs.request(self.settings)))

    # --- summaries --------------------------------------------------------------------------------

    def _submit_summaries(self, h: TaskHistory, episodes: list[EpisodeRow]) -> None:
        s = self.settings
        for rec in h.with_status(PromptStatus.POOL, PromptStatus.REJECTED):
            if rec.summary or JobKey("summary", rec.id) in self.jobs or rec.n_episodes == 0:
                continue
            mine = [e for e in episodes if e.prompt_id == rec.id and e.success is not None and e.file_path]
            if self.vlm is None or not self.health.available:
                self.store.set_prompt_summary(rec.id, _counted_summary(rec, "no VLM summary"))
                continue
            files = [
                (e.file_path, bool(e.success))
                for e in _pick_rollouts(mine, s.max_images_per_request // s.frames_per_rollout)
            ]
            job = SummarizePrompt(h.task, h.canonical, rec, files)
            self.jobs.start(job, partial(job.run, self.vlm, s))

    # --- success proposals ------------------------------------------------------------------------

    def _submit_success_proposals(self) -> None:
        if not self.health.available:
            return
        room = self.settings.workers * 2 - len(self.jobs)
        if room <= 0:
            return
        # Episodes waiting for the operator first: that is where a proposal helps now. Labelled ones
        # (e.g. by the simulator) are scanned from a watermark so a long run is not re-read each poll.
        waiting = self.store.episodes(status=EpisodeStatus.AWAITING_LABEL)
        labelled = self.store.episodes(
            status=EpisodeStatus.LABELLED, since_id=self._labelled_watermark, limit=200
        )
        contiguous = True
        for e in labelled:
            handled = (
                e.vlm_proposal is not None or not e.file_path or JobKey("success", e.id) in self._gave_up
            )
            contiguous = contiguous and handled
            if contiguous:
                self._labelled_watermark = e.id
        for e in [*waiting, *labelled]:
            key = JobKey("success", e.id)
            if e.vlm_proposal is not None or not e.file_path or key in self.jobs or key in self._gave_up:
                continue
            spec = self.catalogue.tasks.get(e.task)  # a task of an earlier tasks file: no description
            job = JudgeSuccess(e, spec.success_description if spec else "")
            assert self.vlm is not None
            self.jobs.start(job, partial(job.run, self.vlm, self.settings))
            room -= 1
            if room <= 0:
                return

    # --- workers and their results -----------------------------------------------------------------

    def _collect(self) -> None:
        for job, fut in self.jobs.finished():
            try:
                result = fut.result()
            except VLMError as e:
                if not e.retryable and isinstance(job, SummarizePrompt):  # e.g. unreadable files: not again
                    self.store.set_prompt_summary(job.record.id, _counted_summary(job.record, str(e)))
                    continue
                self._failed(job, str(e))
                continue
            except Exception as e:  # a broken episode file, a bug: log it, keep serving
                log.exception("supervisor job %s failed", job.key)
                self._failed(job, f"{type(e).__name__}: {e}")
                continue
            if not isinstance(job, ProposeCandidates) or isinstance(self.proposer, VLMProposer):
                self.health.success()
                self.counters["vlm_ok"] += 1
            self._apply(job, result)

    def _apply(self, job: Job, result: JobResult) -> None:
        """One handler per kind of job: store what the worker brought back."""
        match job:
            case ProposeCandidates():
                assert isinstance(result, CandidateResult)
                self._apply_proposal(job.history, job.plan, result)
            case SummarizePrompt():
                assert isinstance(result, SummaryResult)
                self.store.set_prompt_summary(job.record.id, result.summary)
            case JudgeSuccess():
                assert isinstance(result, SuccessResult)
                eid = job.episode.id
                try:
                    self.store.add_label(eid, result.success, source=LabelSource.VLM, reason=result.reason)
                except Exception as e:  # aborted meanwhile: the proposal has nowhere to go
                    log.info("episode %s: VLM proposal not stored (%s)", eid, e)
            case _:
                assert_never(job)

    def _failed(self, job: Job, error: str) -> None:
        """One handler per kind of job for a failed VLM request."""
        self.counters["vlm_failed"] += 1
        self.health.failure(error)
        log.warning("VLM %s failed: %s", job.key, error)
        match job:
            case ProposeCandidates():
                if not self.health.available:
                    self._fallback_proposal(job, error)
                # else the round is simply asked again on a later poll
            case SummarizePrompt():
                pass  # asked again on a later poll
            case JudgeSuccess():
                # An outage ends; an episode the VLM cannot judge three times is left to the operator.
                self._job_failures[job.key] = self._job_failures.get(job.key, 0) + 1
                if self._job_failures[job.key] >= JOB_FAILURES_BEFORE_GIVING_UP:
                    self._gave_up.add(job.key)
            case _:
                assert_never(job)

    def _on_call(self, record: CallRecord) -> None:
        with self._calls_lock:
            self._calls.append(record)

    def _flush_calls(self) -> None:
        with self._calls_lock:
            calls, self._calls = self._calls, []
        for c in calls:
            error = c.error if c.attempts <= 1 else f"{c.error} [{c.attempts} attempts]".strip()
            self.store.record_supervisor_call(
                c.kind, c.model, c.prompt_tokens, c.completion_tokens, c.cost_usd, c.latency_s, c.ok, error
            )

    def publish(self, force: bool = False, phase: SupervisorPhase = "running") -> None:
        """Service state for the page and health checks; the confusion matrix every PUBLISH_S."""
        with self._publish_lock:  # the poll loop and the heartbeat thread both publish
            now = time.monotonic()
            if force or now >= self._next_publish:
                self._next_publish = now + PUBLISH_S
                cm = confusion((e.vlm_proposal, e.success) for e in self.store.episodes())
                if cm.agreement is not None and cm.n != self._confusion.get("n"):
                    # A curve for the page: how often the VLM's proposal matched the operator's label.
                    self.store.add_metric("supervisor/vlm_agreement", cm.agreement, cm.n)
                self._confusion = cm.as_dict()
            inflight = self.jobs.in_flight()
            poll_started, poll_ended = self._poll_started, self._poll_ended
            poll_running_s = round(time.time() - poll_started, 1) if poll_started > poll_ended else 0.0
            self._last_publish = time.monotonic()
            state = SupervisorState(
                phase=phase,
                proposer=self.proposer.source,
                eta=self.settings.eta,  # the page flags rejected prompts whose labels now reach it
                iterations_t0=self.settings.iterations_t0,
                candidates_k=self.settings.candidates_k,
                pool_min_m=self.settings.pool_min_m,
                vlm_available=self.health.available,
                last_vlm_error=self.health.last_error,
                inflight=sorted(str(k) for k in inflight),
                confusion=self._confusion,
                analysis=dict(self.last_analysis),
                **self.counters,
                # A poll still running long after it started shows here, not as a dead service.
                poll_running_s=poll_running_s,
                last_poll_end_time=poll_ended,
                time=time.time(),
            )
            write_state(self.store, SERVICE_NAME, state)


# --- small helpers -------------------------------------------------------------------------------


def _pick_rollouts(episodes: list[EpisodeRow], n: int) -> list[EpisodeRow]:
    """Up to n rollouts, newest first, successes and failures alternating (both are informative)."""
    wins = [e for e in reversed(episodes) if e.success]
    losses = [e for e in reversed(episodes) if not e.success]
    out: list[EpisodeRow] = []
    while len(out) < n and (wins or losses):
        for group in (wins, losses):
            if group and len(out) < n:
                out.append(group.pop(0))
    return out


def _rate(outcomes: list[bool | None]) -> float | None:
    known = [bool(o) for o in outcomes if o is not None]
    return sum(known) / len(known) if known else None


def _trend(outcomes: list[bool]) -> str:
    if len(outcomes) < 2 * TREND_WINDOW:
        return "unknown (too few canonical rollouts)"
    recent = sum(outcomes[-TREND_WINDOW:]) / TREND_WINDOW
    before = sum(outcomes[-2 * TREND_WINDOW : -TREND_WINDOW]) / TREND_WINDOW
    if recent > before:
        return f"rising ({before:.0%} -> {recent:.0%})"
    if recent < before:
        return f"falling ({before:.0%} -> {recent:.0%})"
    return f"flat ({recent:.0%})"


def _counted_summary(rec: PromptRecord, why: str) -> str:
    return f"{rec.n_success}/{rec.n_episodes} labelled rollouts succeeded ({why})."
