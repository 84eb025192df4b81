"""Episode history (paged, filtered), labels and relabels, discard/restore, notes, videos."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import FileResponse

from operator_ui.deps import RowId, RowIdQuery, StoreDep, TokenDep
from operator_ui.routers.loop import refuse_in_practice
from operator_ui.schemas import (
    DiscardIn,
    EpisodeDetailOut,
    EpisodeOut,
    LabelIn,
    LabelledOut,
    LabelOut,
    NoteIn,
    PPOUseOut,
)
from pde_contract.records import EpisodeStatus, Stage
from pde_storage import CheckpointRow, EpisodeRow, LabelRow
from pde_storage.models import ROW_ID_MAX
from pde_storage.protocols import EpisodeReader

router = APIRouter(prefix="/api/episodes", tags=["episodes"])


@router.get("")
def list_episodes(
    store: StoreDep,
    task: str | None = None,
    status: EpisodeStatus | None = None,
    stage: Stage | None = None,
    prompt_id: RowIdQuery = None,
    label: Literal["success", "failure", "none"] | None = None,
    before_id: Annotated[
        int | None, Query(ge=1, le=ROW_ID_MAX, description="page: episodes older than this id")
    ] = None,
    limit: int = Query(50, ge=1, le=1000),
) -> list[EpisodeOut]:
    """Newest first; pass the last id of a page as ``before_id`` for the next (older) page."""
    rows = store.episodes(
        task=task or None,
        status=status,
        limit=limit,
        newest_first=True,
        prompt_id=prompt_id,
        before_id=before_id,
        stage=stage,
        success={"success": True, "failure": False}.get(label or ""),
        unlabelled=label == "none",
    )
    return [EpisodeOut.of(e) for e in rows]


def ppo_use(
    episode: EpisodeRow, labels: list[LabelRow], checkpoints: list[CheckpointRow]
) -> PPOUseOut | None:
    """The first PPO update that trained on this episode's label, or None: a checkpoint whose batch
    reached this episode (``trained_through_episode_id``) written after the episode's first
    authoritative label. A batch holds the labelled RL episodes and the bootstrap successes; a
    relabel or a discard now does not change that update (the next ones use the new label)."""
    if episode.stage != Stage.RL and episode.success is not True:
        return None
    first = next((lab.created_at for lab in labels if lab.authoritative), None)
    if first is None:
        return None
    for c in checkpoints:
        through = c.trained_through_episode_id
        if isinstance(through, int | float) and through >= episode.id and c.created_at >= first:
            return PPOUseOut(version=c.version, trained_through_episode_id=int(through), at=c.created_at)
    return None


@router.get("/{episode_id}")
def get_episode(episode_id: RowId, store: StoreDep) -> EpisodeDetailOut:
    e = store.episode(episode_id)
    labels = store.labels(episode_id)
    return EpisodeDetailOut.of(
        e,
        labels=[LabelOut.model_validate(lab) for lab in labels],
        ppo_used=ppo_use(e, labels, store.checkpoints()),
    )


def labelled(store: EpisodeReader, lab: LabelRow) -> LabelledOut:
    return LabelledOut(
        label=LabelOut.model_validate(lab), episode=EpisodeOut.of(store.episode(lab.episode_id))
    )


@router.post("/{episode_id}/label", dependencies=[TokenDep])
def label_episode(episode_id: RowId, body: LabelIn, store: StoreDep) -> LabelledOut:
    """The operator's label of an ended episode; a second one is refused (use relabel)."""
    refuse_in_practice(store)
    lab = store.add_label(
        episode_id, body.success, source="operator", reason=body.reason, operator=body.operator
    )
    return labelled(store, lab)


@router.post("/{episode_id}/relabel", dependencies=[TokenDep])
def relabel_episode(episode_id: RowId, body: LabelIn, store: StoreDep) -> LabelledOut:
    """Change a label; the earlier ones stay in the history."""
    refuse_in_practice(store)
    lab = store.add_label(
        episode_id, body.success, source="operator", reason=body.reason, relabel=True, operator=body.operator
    )
    return labelled(store, lab)


@router.post("/{episode_id}/discard", dependencies=[TokenDep])
def discard_episode(episode_id: RowId, body: DiscardIn, store: StoreDep) -> EpisodeOut:
    """Keep the episode but leave it out of training and statistics (undo: restore)."""
    refuse_in_practice(store)
    return EpisodeOut.of(store.discard_episode(episode_id, body.reason))


@router.post("/{episode_id}/restore", dependencies=[TokenDep])
def restore_episode(episode_id: RowId, store: StoreDep) -> EpisodeOut:
    return EpisodeOut.of(store.restore_episode(episode_id))


@router.put("/{episode_id}/note", dependencies=[TokenDep])
def set_note(episode_id: RowId, body: NoteIn, store: StoreDep) -> EpisodeOut:
    return EpisodeOut.of(store.set_episode_note(episode_id, body.note))


@router.get("/{episode_id}/video/{camera}")
def episode_video(episode_id: RowId, camera: str, store: StoreDep) -> FileResponse:
    e = store.episode(episode_id)
    path = e.video_paths.get(camera)
    if path is None or not Path(path).is_file():
        have = ", ".join(sorted(e.video_paths)) or "none (the episode has not ended)"
        raise HTTPException(404, f"episode {episode_id} has no video for camera {camera!r}; cameras: {have}")
    return FileResponse(path, media_type="video/mp4")
