"""Episode history, labels and relabels, videos."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import FileResponse

from operator_ui.deps import StoreDep, TokenDep
from operator_ui.schemas import LabelIn, episode_json, label_json

router = APIRouter(prefix="/api/episodes", tags=["episodes"])


@router.get("")
def list_episodes(
    store: StoreDep,
    task: str | None = None,
    status: str | None = None,
    limit: int = Query(50, ge=1, le=1000),
) -> list[dict[str, Any]]:
    return [episode_json(e) for e in store.episodes(task=task, status=status, limit=limit, newest_first=True)]


@router.get("/{episode_id}")
def get_episode(episode_id: int, store: StoreDep) -> dict[str, Any]:
    e = store.episode(episode_id)
    return {**episode_json(e), "labels": [label_json(lab) for lab in store.labels(episode_id)]}


@router.post("/{episode_id}/label", dependencies=[TokenDep])
def label_episode(episode_id: int, body: LabelIn, store: StoreDep) -> dict[str, Any]:
    """The operator's label of an ended episode; a second one is refused (use relabel)."""
    lab = store.add_label(episode_id, body.success, source="operator", reason=body.reason)
    return {"label": label_json(lab), "episode": episode_json(store.episode(episode_id))}


@router.post("/{episode_id}/relabel", dependencies=[TokenDep])
def relabel_episode(episode_id: int, body: LabelIn, store: StoreDep) -> dict[str, Any]:
    """Change a label; the earlier ones stay in the history."""
    lab = store.add_label(episode_id, body.success, source="operator", reason=body.reason, relabel=True)
    return {"label": label_json(lab), "episode": episode_json(store.episode(episode_id))}


@router.get("/{episode_id}/video/{camera}")
def episode_video(episode_id: int, camera: str, store: StoreDep) -> FileResponse:
    e = store.episode(episode_id)
    path = e.video_paths.get(camera)
    if path is None or not Path(path).is_file():
        have = ", ".join(sorted(e.video_paths)) or "none (the episode has not ended)"
        raise HTTPException(404, f"episode {episode_id} has no video for camera {camera!r}; cameras: {have}")
    return FileResponse(path, media_type="video/mp4")
