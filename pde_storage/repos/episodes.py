"""Episodes, their chunks, labels and files: the episode aggregate."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec
import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from pde_contract.episodes import EPISODE_SUFFIX, EpisodeFile, read_episode, rows_commanded_by, write_episode
from pde_contract.records import EpisodeStatus, LabelSource, Stage
from pde_storage import media
from pde_storage.errors import ConflictError, InvalidArgumentError, NotFoundError
from pde_storage.models import ChunkRow, Episode, Label, Prompt, Task
from pde_storage.repos.base import Repository, as_utc, as_utc_opt, choice, choices, stored, utc_now
from pde_storage.rows import (
    AUTHORITATIVE_SOURCES,
    DISCARDABLE_STATUSES,
    IN_PLAY_STATUSES,
    ChunkInfo,
    EpisodeRow,
    LabelRow,
)


class EpisodeRepository(Repository):
    """An episode (running -> awaiting_label -> labelled, or aborted; discarded and restored), its
    chunk rows, its labels (authoritative ones decide success; VLM ones are proposals), and its
    files under the media folder (the episode file and one mp4 per camera)."""

    def _abs(self, rel: str) -> str:
        return str(self.media_dir / rel) if rel else ""

    def _episode_rows(self, s: Session, eps: list[tuple[Episode, str]]) -> list[EpisodeRow]:
        vlm: dict[int, Label] = {}
        ids = [e.id for e, _ in eps]
        if ids:
            q = (
                select(Label)
                .where(Label.episode_id.in_(ids), Label.source == LabelSource.VLM)
                .order_by(Label.id)
            )
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
                stage=stored(Stage, e.stage, "episodes.stage", e.id),
                status=stored(EpisodeStatus, e.status, "episodes.status", e.id),
                success=e.success,
                vlm_proposal=vlm[e.id].success if e.id in vlm else None,
                vlm_reason=vlm[e.id].reason if e.id in vlm else "",
                file_path=self._abs(e.file_path),
                video_paths={k: self._abs(v) for k, v in (e.video_paths or {}).items()},
                created_at=as_utc(e.created_at),
                finished_at=as_utc_opt(e.finished_at),
                labelled_at=as_utc_opt(e.labelled_at),
                abort_reason=e.abort_reason,
                seed=e.seed,
                n_chunks=e.n_chunks,
                discarded_at=as_utc_opt(e.discarded_at),
                discard_reason=e.discard_reason or "",
                note=e.note or "",
                n_interventions=e.n_interventions or 0,
                n_person_rows=e.n_person_rows or 0,
            )
            for e, name in eps
        ]

    def create_episode(
        self, task: str, rollout_prompt_id: int, policy_version: int, stage: str, seed: int | None = None
    ) -> EpisodeRow:
        stage = choice("stage", stage, Stage)
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
                status=EpisodeStatus.RUNNING,
                seed=seed,
                success=None,
                created_at=utc_now(),
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
        in_stage = None if stage is None else choice("stage", stage, Stage)
        statuses = choices("episode status", status, EpisodeStatus)
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
            if in_stage is not None:
                q = q.where(Episode.stage == in_stage)
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
                q = q.where(Episode.status == choice("episode status", status, EpisodeStatus))
            return int(s.scalar(q) or 0)

    def policy_versions_in_use(self) -> set[int]:
        """Policy versions of the episodes still in play (running, or awaiting their label): the
        checkpoint files the loop's retention must keep."""
        with self._read() as s:
            q = select(Episode.policy_version).where(Episode.status.in_(IN_PLAY_STATUSES)).distinct()
            return {int(v) for v in s.scalars(q)}

    @staticmethod
    def _locked_episode(s: Session, episode_id: int) -> Episode:
        e = s.get(Episode, episode_id, with_for_update=True)
        if e is None:
            raise NotFoundError(f"unknown episode id {episode_id}")
        return e

    def _check_finishing(self, episode_id: int, episode_file: EpisodeFile) -> None:
        current = self.episode(episode_id)
        if current.status != EpisodeStatus.RUNNING:
            raise ConflictError(
                f"episode {episode_id} is {current.status}, not running; only a running episode can finish"
                + (f" (aborted: {current.abort_reason})" if current.abort_reason else "")
            )
        if episode_file.task != current.task:
            raise InvalidArgumentError(
                f"episode file is for task {episode_file.task!r}, episode {episode_id} runs {current.task!r}"
            )

    def encode_episode_videos(self, episode_id: int, episode_file: EpisodeFile) -> dict[str, Path]:
        """Encode one mp4 per camera of a running episode's frames to ``videos/<id>_<camera>.mp4``
        under the media folder -> {camera: path}. The slow step of ending an episode, run before
        ``finish_episode(..., videos=...)`` records the paths with the rest, so an episode that
        awaits its label has its videos from the first moment anyone can see it. It writes files
        only (no row changes, no transaction held); an episode finished without it has none."""
        self._check_finishing(episode_id, episode_file)
        return media.write_episode_videos(episode_file, self.media_dir / "videos", f"{episode_id:07d}")

    def finish_episode(
        self, episode_id: int, episode_file: EpisodeFile, *, videos: Mapping[str, Path] | None = None
    ) -> EpisodeRow:
        """Store the episode file, its chunk rows and the paths of its ``videos`` (from
        ``encode_episode_videos``; files under the media folder); the episode then awaits its
        label."""
        self._check_finishing(episode_id, episode_file)
        rel_videos: dict[str, str] = {}
        for cam, path in (videos or {}).items():
            try:
                rel_videos[cam] = str(Path(path).resolve().relative_to(self.media_dir))
            except ValueError:
                raise InvalidArgumentError(
                    f"video {path} of camera {cam!r} is not under the media folder {self.media_dir}; "
                    "write it with encode_episode_videos"
                ) from None
        if episode_file.episode_id != str(episode_id):
            episode_file = msgspec.structs.replace(episode_file, episode_id=str(episode_id))
        # The file is written outside any transaction: no lock is held meanwhile.
        rel_file = f"episodes/{episode_id:07d}{EPISODE_SUFFIX}"
        write_episode(self.media_dir / rel_file, episode_file)
        with self._write() as s:
            e = self._locked_episode(s, episode_id)
            if e.status != EpisodeStatus.RUNNING:
                raise ConflictError(f"episode {episode_id} became {e.status} while its files were written")
            e.status = EpisodeStatus.AWAITING_LABEL
            e.finished_at = utc_now()
            e.file_path = rel_file
            e.video_paths = rel_videos
            e.n_chunks = len(episode_file.chunks)
            e.n_interventions = len(episode_file.interventions)
            e.n_person_rows = rows_commanded_by(episode_file, "person")
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
            if e.status != EpisodeStatus.RUNNING:
                raise ConflictError(
                    f"episode {episode_id} is {e.status}; only a running episode can be aborted"
                )
            e.status = EpisodeStatus.ABORTED
            e.abort_reason = reason
            e.finished_at = utc_now()
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
                    + (" (abort it first)" if e.status == EpisodeStatus.RUNNING else "")
                )
            e.status_before_discard, e.status = e.status, EpisodeStatus.DISCARDED
            e.discarded_at, e.discard_reason = utc_now(), reason.strip()
        return self.episode(episode_id)

    def restore_episode(self, episode_id: int) -> EpisodeRow:
        """Undo ``discard_episode``: the episode counts again, with the status it had."""
        with self._write() as s:
            e = self._locked_episode(s, episode_id)
            if e.status != EpisodeStatus.DISCARDED:
                raise ConflictError(f"episode {episode_id} is {e.status}, not discarded; nothing to restore")
            e.status, e.status_before_discard = e.status_before_discard or EpisodeStatus.AWAITING_LABEL, ""
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
            eps = list(
                s.scalars(select(Episode).where(Episode.status == EpisodeStatus.RUNNING).with_for_update())
            )
            now = utc_now()
            for e in eps:
                e.status, e.abort_reason, e.finished_at = EpisodeStatus.ABORTED, reason, now
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
        operator: str = "",
    ) -> LabelRow:
        """Label an ended episode. Operator/simulator labels decide success; a second one needs
        ``relabel=True`` and the earlier ones stay as history. VLM labels are proposals.
        ``operator``: who gave it (an operator label's name, up to 100 characters)."""
        source = choice("label source", source, LabelSource)
        operator = operator.strip()
        if len(operator) > 100:
            raise InvalidArgumentError(f"operator name is {len(operator)} characters; at most 100")
        if not isinstance(success, bool | np.bool_):
            raise InvalidArgumentError(f"success must be true or false, got {success!r}")
        with self._write() as s:
            e = self._locked_episode(s, episode_id)
            if e.status == EpisodeStatus.RUNNING:
                raise ConflictError(f"episode {episode_id} is still running; label it after it ends")
            if e.status == EpisodeStatus.ABORTED:
                raise ConflictError(f"episode {episode_id} was aborted ({e.abort_reason}); it takes no label")
            if e.status == EpisodeStatus.DISCARDED:
                raise ConflictError(
                    f"episode {episode_id} is discarded ({e.discard_reason}); restore it before labelling"
                )
            authoritative = source in AUTHORITATIVE_SOURCES
            if authoritative and e.status == EpisodeStatus.LABELLED and not relabel:
                raise ConflictError(
                    f"episode {episode_id} is already labelled {'success' if e.success else 'failure'}; "
                    "use relabel to change it (the earlier label is kept as history)"
                )
            now = utc_now()
            lab = Label(
                episode_id=e.id,
                success=bool(success),
                source=source,
                reason=reason,
                created_at=now,
                operator=operator,
            )
            s.add(lab)
            if authoritative:
                e.success, e.status, e.labelled_at = bool(success), EpisodeStatus.LABELLED, now
            s.flush()
            return self._label_row(lab)

    def labels(self, episode_id: int) -> list[LabelRow]:
        with self._read() as s:
            if s.get(Episode, episode_id) is None:
                raise NotFoundError(f"unknown episode id {episode_id}")
            q = select(Label).where(Label.episode_id == episode_id).order_by(Label.id)
            return [self._label_row(lab) for lab in s.scalars(q)]

    @staticmethod
    def _label_row(lab: Label) -> LabelRow:
        return LabelRow(
            lab.id,
            lab.episode_id,
            lab.success,
            stored(LabelSource, lab.source, "labels.source", lab.id),
            lab.reason,
            as_utc(lab.created_at),
            lab.operator or "",
        )
