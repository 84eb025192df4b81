"""What the operator needs at a glance: the loop's phase, the current task, prompt and episode."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from operator_ui.deps import SettingsDep, StoreDep
from operator_ui.routers.loop import loop_state
from operator_ui.schemas import episode_json

router = APIRouter(prefix="/api", tags=["state"])


@router.get("/state")
def state(store: StoreDep, settings: SettingsDep) -> dict[str, Any]:
    loop, age, alive = loop_state(store, settings.service_stale_s)
    current = None
    if loop.get("episode_id") is not None:
        current = episode_json(store.episode(int(loop["episode_id"])))
    else:
        waiting = store.episodes(status="awaiting_label", limit=1, newest_first=True)
        current = episode_json(waiting[0]) if waiting else None
    return {"loop": {**loop, "age_s": age, "alive": alive}, "episode": current}
