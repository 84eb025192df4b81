"""Tasks, their prompts and their training state: the task aggregate."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from pde_contract.records import EpisodeStatus, PromptSource, PromptStatus, Stage
from pde_storage.errors import ConflictError, InvalidArgumentError, NotFoundError
from pde_storage.models import Episode, Prompt, Task
from pde_storage.repos.base import Repository, as_utc, choice, choices, stored, utc_now
from pde_storage.rows import PromptRow, TaskRow, TaskState

TASK_STATE_FIELDS = ("stage", "iteration", "alpha", "ema_success", "rollouts_per_prompt")
# The statuses a prompt can be given or moved between (the canonical prompt's is fixed).
JUDGED_STATUSES = (PromptStatus.CANDIDATE, PromptStatus.POOL, PromptStatus.REJECTED)


class TaskRepository(Repository):
    """A task (name, canonical prompt, stage, iteration, alpha, success EMA, N) and its prompts
    (canonical, candidates, pool, rejected) with their statistics over labelled episodes."""

    def ensure_task(self, name: str, canonical_prompt: str) -> TaskRow:
        """Create the task with its canonical prompt, or return it if it exists unchanged."""
        if not name.strip() or not canonical_prompt.strip():
            raise InvalidArgumentError("a task needs a non-empty name and canonical prompt")
        with self._write() as s:
            t = s.scalars(select(Task).where(Task.name == name)).first()
            if t is not None:
                if t.canonical_prompt != canonical_prompt:
                    raise ConflictError(
                        f"task {name!r} exists with canonical prompt {t.canonical_prompt!r}, not "
                        f"{canonical_prompt!r}; a task's canonical prompt never changes"
                    )
            else:
                now = utc_now()
                t = Task(
                    name=name,
                    canonical_prompt=canonical_prompt,
                    created_at=now,
                    updated_at=now,
                    stage=Stage.BOOTSTRAP,
                    iteration=0,
                    alpha=1.0,
                    ema_success=None,
                )
                s.add(t)
                s.flush()
                s.add(
                    Prompt(
                        task_id=t.id,
                        text=canonical_prompt,
                        status=PromptStatus.CANONICAL,
                        source=PromptSource.CANONICAL,
                        iteration=0,
                        summary="",
                        created_at=now,
                        updated_at=now,
                    )
                )
            return TaskRow(t.id, t.name, t.canonical_prompt, as_utc(t.created_at))

    def tasks(self) -> list[TaskRow]:
        with self._read() as s:
            return [
                TaskRow(t.id, t.name, t.canonical_prompt, as_utc(t.created_at))
                for t in s.scalars(select(Task).order_by(Task.id))
            ]

    @staticmethod
    def _task_state(t: Task) -> TaskState:
        return TaskState(
            t.name,
            stored(Stage, t.stage, "tasks.stage", t.id),
            t.iteration,
            t.alpha,
            t.ema_success,
            as_utc(t.updated_at),
            t.rollouts_per_prompt,
        )

    def task_state(self, task: str) -> TaskState:
        with self._read() as s:
            t = self._task(s, task)
            return self._task_state(t)

    def set_task_state(self, task: str, **fields: Any) -> TaskState:
        unknown = set(fields) - set(TASK_STATE_FIELDS)
        if unknown:
            raise InvalidArgumentError(
                f"unknown task-state field(s) {sorted(unknown)}; allowed: {', '.join(TASK_STATE_FIELDS)}"
            )
        if "stage" in fields:
            fields["stage"] = choice("stage", fields["stage"], Stage)
        if "alpha" in fields and not 0.0 <= float(fields["alpha"]) <= 1.0:
            raise InvalidArgumentError(f"alpha {fields['alpha']} is outside [0, 1]")
        n = fields.get("rollouts_per_prompt")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise InvalidArgumentError(f"rollouts_per_prompt must be an integer >= 1, got {n!r}")
        with self._write() as s:
            t = self._task(s, task, lock=True)
            for k, v in fields.items():
                setattr(t, k, v)
            t.updated_at = utc_now()
            return self._task_state(t)

    # --- prompts ------------------------------------------------------------------------------

    def add_prompt(
        self, task: str, text: str, status: str = "candidate", source: str = "vlm", iteration: int = 0
    ) -> PromptRow:
        """Add a prompt for ``task``. The same text twice returns the existing row unchanged
        (a VLM repeating itself must not create a second, separately counted prompt)."""
        text = " ".join(text.split())
        if not text:
            raise InvalidArgumentError("prompt text is empty")
        status = choice("prompt status", status, PromptStatus, JUDGED_STATUSES)
        source = choice("prompt source", source, PromptSource)
        with self._write() as s:
            t = self._task(s, task)
            p = s.scalars(select(Prompt).where(Prompt.task_id == t.id, Prompt.text == text)).first()
            if p is None:
                now = utc_now()
                p = Prompt(
                    task_id=t.id,
                    text=text,
                    status=status,
                    source=source,
                    iteration=iteration,
                    summary="",
                    created_at=now,
                    updated_at=now,
                )
                s.add(p)
                s.flush()
            pid = p.id
        return self.prompt(pid)

    def _prompt_rows(
        self, s: Session, prompts: list[tuple[Prompt, str]], stage: Stage | None = None
    ) -> list[PromptRow]:
        ids = [p.id for p, _ in prompts]
        stats: dict[int, tuple[int, ...]] = {}
        if ids:
            labelled = Episode.status == EpisodeStatus.LABELLED
            finished = Episode.status.in_((EpisodeStatus.LABELLED, EpisodeStatus.AWAITING_LABEL))
            q = (
                select(
                    Episode.prompt_id,
                    func.sum(case((labelled, 1), else_=0)),
                    func.sum(case((labelled & (Episode.success == True), 1), else_=0)),  # noqa: E712
                    func.sum(case((finished, 1), else_=0)),
                    func.sum(case((finished, Episode.n_interventions), else_=0)),
                    func.sum(case((finished & (Episode.n_interventions > 0), 1), else_=0)),
                )
                .where(Episode.prompt_id.in_(ids))
                .group_by(Episode.prompt_id)
            )
            if stage is not None:
                q = q.where(Episode.stage == stage)
            for pid, *counts in s.execute(q):
                stats[pid] = tuple(int(c or 0) for c in counts)
        rows = []
        for p, task_name in prompts:
            n, k, fin, n_interventions, n_intervened = stats.get(p.id, (0, 0, 0, 0, 0))
            rows.append(
                PromptRow(
                    id=p.id,
                    task=task_name,
                    text=p.text,
                    status=stored(PromptStatus, p.status, "prompts.status", p.id),
                    source=stored(PromptSource, p.source, "prompts.source", p.id),
                    iteration=p.iteration,
                    summary=p.summary,
                    n_episodes=n,
                    n_success=k,
                    n_finished=fin,
                    created_at=as_utc(p.created_at),
                    n_interventions=n_interventions,
                    n_intervened=n_intervened,
                )
            )
        return rows

    def prompts(
        self, task: str, status: str | Iterable[str] | None = None, stage: str | None = None
    ) -> list[PromptRow]:
        """The task's prompts (oldest first) with their statistics over the task's episodes of
        ``stage`` (None: every stage). The one place a prompt's counts are made: the page shows
        them, the loop schedules by them and the supervisor's pool rule judges by them (over
        ``"bootstrap"``: the policy was frozen while prompts were compared)."""
        statuses = choices("prompt status", status, PromptStatus)
        in_stage = None if stage is None else choice("stage", stage, Stage)
        with self._read() as s:
            t = self._task(s, task)
            q = select(Prompt).where(Prompt.task_id == t.id).order_by(Prompt.id)
            if statuses is not None:
                q = q.where(Prompt.status.in_(statuses))
            return self._prompt_rows(s, [(p, t.name) for p in s.scalars(q)], in_stage)

    def prompt(self, prompt_id: int) -> PromptRow:
        with self._read() as s:
            row = s.execute(
                select(Prompt, Task.name).join(Task, Task.id == Prompt.task_id).where(Prompt.id == prompt_id)
            ).first()
            if row is None:
                raise NotFoundError(f"unknown prompt id {prompt_id}")
            return self._prompt_rows(s, [(row[0], row[1])])[0]

    def set_prompt_status(self, prompt_id: int, status: str, summary: str = "") -> PromptRow:
        """Move a prompt between candidate / pool / rejected; a non-empty ``summary`` replaces
        the stored one-sentence rollout summary."""
        status = choice("prompt status", status, PromptStatus, JUDGED_STATUSES)
        with self._write() as s:
            p = s.get(Prompt, prompt_id, with_for_update=True)
            if p is None:
                raise NotFoundError(f"unknown prompt id {prompt_id}")
            if p.status == PromptStatus.CANONICAL:
                raise ConflictError(f"prompt {prompt_id} is the task's canonical prompt; its status is fixed")
            p.status = status
            if summary:
                p.summary = summary
            p.updated_at = utc_now()
        return self.prompt(prompt_id)

    def set_prompt_summary(self, prompt_id: int, summary: str) -> PromptRow:
        with self._write() as s:
            p = s.get(Prompt, prompt_id, with_for_update=True)
            if p is None:
                raise NotFoundError(f"unknown prompt id {prompt_id}")
            p.summary = summary
            p.updated_at = utc_now()
        return self.prompt(prompt_id)
