"""The Store: the one place where the learner's loop, the supervisor and the operator page read
and write shared state. Every method is one short transaction and returns plain rows."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from sqlalchemy import Engine, case, func, select
from sqlalchemy.orm import Session

from pde_contract.episodes import EpisodeFile, read_episode, write_episode
from pde_contract.settings import DEFAULT_DATABASE_URL
from pde_storage import db, media
from pde_storage.errors import ConflictError, InvalidArgumentError, NotFoundError
from pde_storage.models import (
    Checkpoint,
    ChunkRow,
    Episode,
    Intent,
    Label,
    Metric,
    Prompt,
    ServiceState,
    SupervisorCall,
    Task,
)
from pde_storage.rows import (
    AUTHORITATIVE_SOURCES,
    DISCARDABLE_STATUSES,
    EPISODE_STATUSES,
    LABEL_SOURCES,
    PROMPT_SOURCES,
    PROMPT_STATUSES,
    STAGES,
    CheckpointRow,
    ChunkInfo,
    EpisodeRow,
    IntentRow,
    LabelRow,
    PromptRow,
    ServiceStateRow,
    SupervisorCallRow,
    TaskRow,
    TaskState,
)

DEFAULT_URL = DEFAULT_DATABASE_URL
DEFAULT_MEDIA_DIR = "data/media"
TASK_STATE_FIELDS = ("stage", "iteration", "alpha", "ema_success", "rollouts_per_prompt")


def _now() -> datetime:
    return datetime.now(UTC)


def _utc(t: datetime) -> datetime:
    # SQLite hands back naive datetimes; everything stored is UTC.
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _utc_opt(t: datetime | None) -> datetime | None:
    return None if t is None else _utc(t)


def _json_safe(value: Any) -> Any:
    """JSON columns: numpy scalars become Python numbers and NaN/inf become null (PostgreSQL's
    JSON type refuses NaN, and SQLite would store text no JSON parser reads back)."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _check_choice(what: str, value: str, choices: Iterable[str]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise InvalidArgumentError(f"{what} {value!r} is not one of {', '.join(choices)}")


def _scalar_extra(extras: dict[str, np.ndarray], key: str) -> float | None:
    a = extras.get(key)
    if a is None or np.size(a) != 1:
        return None
    v = float(np.asarray(a).reshape(()))
    return v if math.isfinite(v) else None


class Store:
    def __init__(self, url: str, media_dir: str | Path, *, migrate: bool = True) -> None:
        self.url = db.normalise_url(url)
        self.media_dir = Path(media_dir).resolve()
        self.media_dir.mkdir(parents=True, exist_ok=True)
        # Writes take SQLite's lock at BEGIN; reads never block writers (WAL).
        self._write_engine: Engine = db.make_engine(self.url, immediate=True)
        self._read_engine: Engine = db.make_engine(self.url)
        if migrate:
            db.upgrade(self._write_engine)

    @classmethod
    def open(cls, url: str = DEFAULT_URL, media_dir: str | Path = DEFAULT_MEDIA_DIR) -> Store:
        """Connect and bring the schema to the newest Alembic revision."""
        return cls(url, media_dir)

    def close(self) -> None:
        self._write_engine.dispose()
        self._read_engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def dialect(self) -> str:
        return self._write_engine.dialect.name

    @contextmanager
    def _write(self) -> Iterator[Session]:
        with Session(self._write_engine, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self._read_engine, expire_on_commit=False) as s, s.begin():
            yield s

    # --- tasks --------------------------------------------------------------------------------

    @staticmethod
    def _task(s: Session, name: str, *, lock: bool = False) -> Task:
        q = select(Task).where(Task.name == name)
        if lock:
            q = q.with_for_update()
        t = s.scalars(q).first()
        if t is None:
            known = ", ".join(s.scalars(select(Task.name).order_by(Task.name))) or "none yet"
            raise NotFoundError(f"unknown task {name!r} (known: {known}); create it with ensure_task")
        return t

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
                now = _now()
                t = Task(
                    name=name,
                    canonical_prompt=canonical_prompt,
                    created_at=now,
                    updated_at=now,
                    stage="bootstrap",
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
                        status="canonical",
                        source="canonical",
                        iteration=0,
                        summary="",
                        created_at=now,
                        updated_at=now,
                    )
                )
            return TaskRow(t.id, t.name, t.canonical_prompt, _utc(t.created_at))

    def tasks(self) -> list[TaskRow]:
        with self._read() as s:
            return [
                TaskRow(t.id, t.name, t.canonical_prompt, _utc(t.created_at))
                for t in s.scalars(select(Task).order_by(Task.id))
            ]

    @staticmethod
    def _task_state(t: Task) -> TaskState:
        return TaskState(
            t.name, t.stage, t.iteration, t.alpha, t.ema_success, _utc(t.updated_at), t.rollouts_per_prompt
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
            _check_choice("stage", fields["stage"], STAGES)
        if "alpha" in fields and not 0.0 <= float(fields["alpha"]) <= 1.0:
            raise InvalidArgumentError(f"alpha {fields['alpha']} is outside [0, 1]")
        n = fields.get("rollouts_per_prompt")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise InvalidArgumentError(f"rollouts_per_prompt must be an integer >= 1, got {n!r}")
        with self._write() as s:
            t = self._task(s, task, lock=True)
            for k, v in fields.items():
                setattr(t, k, v)
            t.updated_at = _now()
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
        _check_choice("prompt status", status, [p for p in PROMPT_STATUSES if p != "canonical"])
        _check_choice("prompt source", source, PROMPT_SOURCES)
        with self._write() as s:
            t = self._task(s, task)
            p = s.scalars(select(Prompt).where(Prompt.task_id == t.id, Prompt.text == text)).first()
            if p is None:
                now = _now()
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

    def _prompt_rows(self, s: Session, prompts: list[tuple[Prompt, str]]) -> list[PromptRow]:
        ids = [p.id for p, _ in prompts]
        stats: dict[int, tuple[int, int, int]] = {}
        if ids:
            labelled = Episode.status == "labelled"
            q = (
                select(
                    Episode.prompt_id,
                    func.sum(case((labelled, 1), else_=0)),
                    func.sum(case((labelled & (Episode.success == True), 1), else_=0)),  # noqa: E712
                    func.sum(case((Episode.status.in_(("labelled", "awaiting_label")), 1), else_=0)),
                )
                .where(Episode.prompt_id.in_(ids))
                .group_by(Episode.prompt_id)
            )
            for pid, n, k, fin in s.execute(q):
                stats[pid] = (int(n or 0), int(k or 0), int(fin or 0))
        rows = []
        for p, task_name in prompts:
            n, k, fin = stats.get(p.id, (0, 0, 0))
            rows.append(
                PromptRow(
                    id=p.id,
                    task=task_name,
                    text=p.text,
                    status=p.status,
                    source=p.source,
                    iteration=p.iteration,
                    summary=p.summary,
                    n_episodes=n,
                    n_success=k,
                    n_finished=fin,
                    created_at=_utc(p.created_at),
                )
            )
        return rows

    def prompts(self, task: str, status: str | Iterable[str] | None = None) -> list[PromptRow]:
        """The task's prompts (oldest first) with their statistics over labelled episodes."""
        statuses = [status] if isinstance(status, str) else (list(status) if status is not None else None)
        for st in statuses or []:
            _check_choice("prompt status", st, PROMPT_STATUSES)
        with self._read() as s:
            t = self._task(s, task)
            q = select(Prompt).where(Prompt.task_id == t.id).order_by(Prompt.id)
            if statuses is not None:
                q = q.where(Prompt.status.in_(statuses))
            return self._prompt_rows(s, [(p, t.name) for p in s.scalars(q)])

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
        _check_choice("prompt status", status, [p for p in PROMPT_STATUSES if p != "canonical"])
        with self._write() as s:
            p = s.get(Prompt, prompt_id, with_for_update=True)
            if p is None:
                raise NotFoundError(f"unknown prompt id {prompt_id}")
            if p.status == "canonical":
                raise ConflictError(f"prompt {prompt_id} is the task's canonical prompt; its status is fixed")
            p.status = status
            if summary:
                p.summary = summary
            p.updated_at = _now()
        return self.prompt(prompt_id)

    def set_prompt_summary(self, prompt_id: int, summary: str) -> PromptRow:
        with self._write() as s:
            p = s.get(Prompt, prompt_id, with_for_update=True)
            if p is None:
                raise NotFoundError(f"unknown prompt id {prompt_id}")
            p.summary = summary
            p.updated_at = _now()
        return self.prompt(prompt_id)

    # --- episodes -----------------------------------------------------------------------------

    def _abs(self, rel: str) -> str:
        return str(self.media_dir / rel) if rel else ""

    def _episode_rows(self, s: Session, eps: list[tuple[Episode, str]]) -> list[EpisodeRow]:
        vlm: dict[int, Label] = {}
        ids = [e.id for e, _ in eps]
        if ids:
            q = select(Label).where(Label.episode_id.in_(ids), Label.source == "vlm").order_by(Label.id)
            for lab in s.scalars(q):
                vlm[lab.episode_id] = lab  # the latest proposal wins
        return [
            EpisodeRow(
                id=e.id,
                task=name,
                rollout_prompt=e.rollout_prompt,
                canonical_prompt=e.canonical_prompt,
                prompt_id=e.prompt_id,
                policy_version=e.policy_version,
                stage=e.stage,
                status=e.status,
                success=e.success,
                vlm_proposal=vlm[e.id].success if e.id in vlm else None,
                vlm_reason=vlm[e.id].reason if e.id in vlm else "",
                file_path=self._abs(e.file_path),
                video_paths={k: self._abs(v) for k, v in (e.video_paths or {}).items()},
                created_at=_utc(e.created_at),
                finished_at=_utc_opt(e.finished_at),
                labelled_at=_utc_opt(e.labelled_at),
                abort_reason=e.abort_reason,
                seed=e.seed,
                n_chunks=e.n_chunks,
                discarded_at=_utc_opt(e.discarded_at),
                discard_reason=e.discard_reason or "",
                note=e.note or "",
            )
            for e, name in eps
        ]

    def create_episode(
        self, task: str, rollout_prompt_id: int, policy_version: int, stage: str, seed: int | None = None
    ) -> EpisodeRow:
        _check_choice("stage", stage, STAGES)
        with self._write() as s:
            t = self._task(s, task)
            p = s.get(Prompt, rollout_prompt_id)
            if p is None or p.task_id != t.id:
                raise NotFoundError(f"prompt id {rollout_prompt_id} is not a prompt of task {task!r}")
            e = Episode(
                task_id=t.id,
                prompt_id=p.id,
                rollout_prompt=p.text,
                canonical_prompt=t.canonical_prompt,
                policy_version=int(policy_version),
                stage=stage,
                status="running",
                seed=seed,
                success=None,
                created_at=_now(),
                file_path="",
                video_paths={},
                n_chunks=0,
                abort_reason="",
            )
            s.add(e)
            s.flush()
            return self._episode_rows(s, [(e, t.name)])[0]

    def episode(self, episode_id: int) -> EpisodeRow:
        with self._read() as s:
            row = s.execute(
                select(Episode, Task.name)
                .join(Task, Task.id == Episode.task_id)
                .where(Episode.id == episode_id)
            ).first()
            if row is None:
                raise NotFoundError(f"unknown episode id {episode_id}")
            return self._episode_rows(s, [(row[0], row[1])])[0]

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
    ) -> list[EpisodeRow]:
        """Episodes with ``since_id`` < id < ``before_id``, oldest first unless ``newest_first``;
        ``success`` / ``unlabelled`` filter on the authoritative label."""
        if stage is not None:
            _check_choice("stage", stage, STAGES)
        statuses = [status] if isinstance(status, str) else (list(status) if status is not None else None)
        for st in statuses or []:
            _check_choice("episode status", st, EPISODE_STATUSES)
        with self._read() as s:
            q = select(Episode, Task.name).join(Task, Task.id == Episode.task_id).where(Episode.id > since_id)
            if task is not None:
                q = q.where(Task.id == self._task(s, task).id)
            if statuses is not None:
                q = q.where(Episode.status.in_(statuses))
            if prompt_id is not None:
                q = q.where(Episode.prompt_id == prompt_id)
            if before_id is not None:
                q = q.where(Episode.id < before_id)
            if stage is not None:
                q = q.where(Episode.stage == stage)
            if success is not None:
                q = q.where(Episode.success == success)
            if unlabelled:
                q = q.where(Episode.success.is_(None))
            q = q.order_by(Episode.id.desc() if newest_first else Episode.id)
            if limit is not None:
                q = q.limit(limit)
            return self._episode_rows(s, [(e, n) for e, n in s.execute(q)])

    def count_episodes(self, task: str | None = None, status: str | None = None) -> int:
        with self._read() as s:
            q = select(func.count(Episode.id))
            if task is not None:
                q = q.where(Episode.task_id == self._task(s, task).id)
            if status is not None:
                q = q.where(Episode.status == status)
            return int(s.scalar(q) or 0)

    @staticmethod
    def _locked_episode(s: Session, episode_id: int) -> Episode:
        e = s.get(Episode, episode_id, with_for_update=True)
        if e is None:
            raise NotFoundError(f"unknown episode id {episode_id}")
        return e

    def finish_episode(self, episode_id: int, episode_file: EpisodeFile) -> EpisodeRow:
        """Store the episode file and one mp4 per camera; the episode then awaits its label."""
        current = self.episode(episode_id)
        if current.status != "running":
            raise ConflictError(
                f"episode {episode_id} is {current.status}, not running; only a running episode can finish"
                + (f" (aborted: {current.abort_reason})" if current.abort_reason else "")
            )
        if episode_file.task != current.task:
            raise InvalidArgumentError(
                f"episode file is for task {episode_file.task!r}, episode {episode_id} runs {current.task!r}"
            )
        if episode_file.episode_id != str(episode_id):
            episode_file = msgspec.structs.replace(episode_file, episode_id=str(episode_id))
        # The slow part (encoding) happens outside any transaction: no lock is held meanwhile.
        stem = f"{episode_id:07d}"
        rel_file = f"episodes/{stem}.episode"
        write_episode(self.media_dir / rel_file, episode_file)
        videos = media.write_episode_videos(episode_file, self.media_dir / "videos", stem)
        rel_videos = {cam: str(p.relative_to(self.media_dir)) for cam, p in videos.items()}
        with self._write() as s:
            e = self._locked_episode(s, episode_id)
            if e.status != "running":
                raise ConflictError(f"episode {episode_id} became {e.status} while its files were written")
            e.status = "awaiting_label"
            e.finished_at = _now()
            e.file_path = rel_file
            e.video_paths = rel_videos
            e.n_chunks = len(episode_file.chunks)
            for i, c in enumerate(episode_file.chunks):
                s.add(
                    ChunkRow(
                        episode_id=e.id,
                        index=i,
                        observation_time_s=float(c.observation.publish_time_s),
                        n_steps=int(c.actions.shape[0]),
                        inference_s=c.inference_s,
                        sent_time_s=c.sent_time_s,
                    )
                )
        return self.episode(episode_id)

    def abort_episode(self, episode_id: int, reason: str) -> EpisodeRow:
        if not reason.strip():
            raise InvalidArgumentError("abort_episode needs a reason (it is shown to the operator)")
        with self._write() as s:
            e = self._locked_episode(s, episode_id)
            if e.status != "running":
                raise ConflictError(
                    f"episode {episode_id} is {e.status}; only a running episode can be aborted"
                )
            e.status = "aborted"
            e.abort_reason = reason
            e.finished_at = _now()
        return self.episode(episode_id)

    def discard_episode(self, episode_id: int, reason: str) -> EpisodeRow:
        """Keep the episode and its labels but leave it out of training and every statistic
        (status "discarded"); ``restore_episode`` undoes it."""
        if not reason.strip():
            raise InvalidArgumentError("discard_episode needs a reason (e.g. 'bad reset', 'person in scene')")
        with self._write() as s:
            e = self._locked_episode(s, episode_id)
            if e.status not in DISCARDABLE_STATUSES:
                raise ConflictError(
                    f"episode {episode_id} is {e.status}; only an ended episode can be discarded"
                    + (" (abort it first)" if e.status == "running" else "")
                )
            e.status_before_discard, e.status = e.status, "discarded"
            e.discarded_at, e.discard_reason = _now(), reason.strip()
        return self.episode(episode_id)

    def restore_episode(self, episode_id: int) -> EpisodeRow:
        """Undo ``discard_episode``: the episode counts again, with the status it had."""
        with self._write() as s:
            e = self._locked_episode(s, episode_id)
            if e.status != "discarded":
                raise ConflictError(f"episode {episode_id} is {e.status}, not discarded; nothing to restore")
            e.status, e.status_before_discard = e.status_before_discard or "awaiting_label", ""
            e.discarded_at, e.discard_reason = None, ""
        return self.episode(episode_id)

    def set_episode_note(self, episode_id: int, note: str) -> EpisodeRow:
        """The operator's free-text note on an episode (replaces the previous one)."""
        with self._write() as s:
            self._locked_episode(s, episode_id).note = note
        return self.episode(episode_id)

    def abort_running_episodes(self, reason: str) -> list[int]:
        """After a crash: every episode still marked running was interrupted."""
        with self._write() as s:
            eps = list(s.scalars(select(Episode).where(Episode.status == "running").with_for_update()))
            now = _now()
            for e in eps:
                e.status, e.abort_reason, e.finished_at = "aborted", reason, now
            return [e.id for e in eps]

    def load_episode_file(self, episode_id: int) -> EpisodeFile:
        e = self.episode(episode_id)
        if not e.file_path:
            raise ConflictError(f"episode {episode_id} is {e.status} and has no episode file")
        return read_episode(e.file_path)

    def chunks(self, episode_id: int) -> list[ChunkInfo]:
        with self._read() as s:
            q = select(ChunkRow).where(ChunkRow.episode_id == episode_id).order_by(ChunkRow.index)
            return [
                ChunkInfo(
                    c.episode_id, c.index, c.observation_time_s, c.n_steps, c.inference_s, c.sent_time_s
                )
                for c in s.scalars(q)
            ]

    # --- labels -------------------------------------------------------------------------------

    def add_label(
        self,
        episode_id: int,
        success: bool,
        source: str = "operator",
        reason: str = "",
        *,
        relabel: bool = False,
    ) -> LabelRow:
        """Label an ended episode. Operator/simulator labels decide success; a second one needs
        ``relabel=True`` and the earlier ones stay as history. VLM labels are proposals."""
        _check_choice("label source", source, LABEL_SOURCES)
        if not isinstance(success, bool | np.bool_):
            raise InvalidArgumentError(f"success must be true or false, got {success!r}")
        with self._write() as s:
            e = self._locked_episode(s, episode_id)
            if e.status == "running":
                raise ConflictError(f"episode {episode_id} is still running; label it after it ends")
            if e.status == "aborted":
                raise ConflictError(f"episode {episode_id} was aborted ({e.abort_reason}); it takes no label")
            if e.status == "discarded":
                raise ConflictError(
                    f"episode {episode_id} is discarded ({e.discard_reason}); restore it before labelling"
                )
            authoritative = source in AUTHORITATIVE_SOURCES
            if authoritative and e.status == "labelled" and not relabel:
                raise ConflictError(
                    f"episode {episode_id} is already labelled {'success' if e.success else 'failure'}; "
                    "use relabel to change it (the earlier label is kept as history)"
                )
            now = _now()
            lab = Label(episode_id=e.id, success=bool(success), source=source, reason=reason, created_at=now)
            s.add(lab)
            if authoritative:
                e.success, e.status, e.labelled_at = bool(success), "labelled", now
            s.flush()
            return LabelRow(lab.id, lab.episode_id, lab.success, lab.source, lab.reason, _utc(lab.created_at))

    def labels(self, episode_id: int) -> list[LabelRow]:
        with self._read() as s:
            if s.get(Episode, episode_id) is None:
                raise NotFoundError(f"unknown episode id {episode_id}")
            q = select(Label).where(Label.episode_id == episode_id).order_by(Label.id)
            return [
                LabelRow(lab.id, lab.episode_id, lab.success, lab.source, lab.reason, _utc(lab.created_at))
                for lab in s.scalars(q)
            ]

    # --- checkpoints, supervisor calls, metrics -------------------------------------------------

    def add_checkpoint(
        self, version: int, path: str | Path, metrics: dict[str, Any] | None = None
    ) -> CheckpointRow:
        with self._write() as s:
            if s.scalars(select(Checkpoint).where(Checkpoint.version == version)).first() is not None:
                raise ConflictError(f"checkpoint version {version} already exists; versions only go up")
            c = Checkpoint(
                version=int(version),
                path=str(path),
                metrics=_json_safe(dict(metrics or {})),
                created_at=_now(),
            )
            s.add(c)
        return CheckpointRow(c.version, c.path, c.metrics, _utc(c.created_at))

    def latest_checkpoint(self) -> CheckpointRow | None:
        with self._read() as s:
            c = s.scalars(select(Checkpoint).order_by(Checkpoint.version.desc()).limit(1)).first()
            return None if c is None else CheckpointRow(c.version, c.path, c.metrics, _utc(c.created_at))

    def checkpoints(self) -> list[CheckpointRow]:
        with self._read() as s:
            return [
                CheckpointRow(c.version, c.path, c.metrics, _utc(c.created_at))
                for c in s.scalars(select(Checkpoint).order_by(Checkpoint.version))
            ]

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
    ) -> SupervisorCallRow:
        with self._write() as s:
            c = SupervisorCall(
                kind=kind,
                model=model,
                prompt_tokens=int(prompt_tokens),
                completion_tokens=int(completion_tokens),
                cost_usd=float(cost_usd),
                latency_s=float(latency_s),
                ok=bool(ok),
                error=error,
                created_at=_now(),
            )
            s.add(c)
            s.flush()
            return self._call_row(c)

    @staticmethod
    def _call_row(c: SupervisorCall) -> SupervisorCallRow:
        return SupervisorCallRow(
            c.id,
            c.kind,
            c.model,
            c.prompt_tokens,
            c.completion_tokens,
            c.cost_usd,
            c.latency_s,
            c.ok,
            c.error,
            _utc(c.created_at),
        )

    def supervisor_calls(self, limit: int = 100) -> list[SupervisorCallRow]:
        with self._read() as s:
            q = select(SupervisorCall).order_by(SupervisorCall.id.desc()).limit(limit)
            return [self._call_row(c) for c in s.scalars(q)]

    def add_metric(self, name: str, value: float, step: int) -> None:
        value = float(value)
        if not math.isfinite(value):
            raise InvalidArgumentError(f"metric {name!r}: value {value} is not finite")
        with self._write() as s:
            s.add(Metric(name=name, value=value, step=int(step), created_at=_now()))

    def metrics(self, name: str) -> list[tuple[int, float, datetime]]:
        with self._read() as s:
            q = select(Metric).where(Metric.name == name).order_by(Metric.step, Metric.id)
            return [(m.step, m.value, _utc(m.created_at)) for m in s.scalars(q)]

    def metric_names(self) -> list[str]:
        with self._read() as s:
            return list(s.scalars(select(Metric.name).distinct().order_by(Metric.name)))

    # --- operator intents and service states ------------------------------------------------------

    @staticmethod
    def _intent_row(i: Intent) -> IntentRow:
        return IntentRow(i.id, i.kind, dict(i.payload or {}), _utc(i.created_at), _utc_opt(i.consumed_at))

    def add_intent(self, kind: str, payload: dict[str, Any] | None = None) -> IntentRow:
        with self._write() as s:
            i = Intent(
                kind=kind, payload=_json_safe(dict(payload or {})), created_at=_now(), consumed_at=None
            )
            s.add(i)
            s.flush()
            return self._intent_row(i)

    def pending_intents(self, kind: str) -> list[IntentRow]:
        with self._read() as s:
            q = select(Intent).where(Intent.kind == kind, Intent.consumed_at.is_(None)).order_by(Intent.id)
            return [self._intent_row(i) for i in s.scalars(q)]

    def take_intent(self, kind: str) -> IntentRow | None:
        """Consume the oldest pending intent of ``kind`` (exactly one consumer gets it)."""
        with self._write() as s:
            q = (
                select(Intent)
                .where(Intent.kind == kind, Intent.consumed_at.is_(None))
                .order_by(Intent.id)
                .limit(1)
                .with_for_update(skip_locked=True)
            )
            i = s.scalars(q).first()
            if i is None:
                return None
            i.consumed_at = _now()
            return self._intent_row(i)

    def discard_intents(self, kind: str) -> int:
        """Mark every pending intent of ``kind`` consumed (e.g. stale clicks from before a restart)."""
        with self._write() as s:
            q = select(Intent).where(Intent.kind == kind, Intent.consumed_at.is_(None)).with_for_update()
            items = list(s.scalars(q))
            now = _now()
            for i in items:
                i.consumed_at = now
            return len(items)

    def set_service_state(self, name: str, state: dict[str, Any]) -> None:
        with self._write() as s:
            row = s.get(ServiceState, name, with_for_update=True)
            if row is None:
                s.add(ServiceState(name=name, state=_json_safe(dict(state)), updated_at=_now()))
            else:
                row.state, row.updated_at = _json_safe(dict(state)), _now()

    def service_states(self) -> dict[str, ServiceStateRow]:
        with self._read() as s:
            return {
                r.name: ServiceStateRow(r.name, dict(r.state or {}), _utc(r.updated_at))
                for r in s.scalars(select(ServiceState).order_by(ServiceState.name))
            }
