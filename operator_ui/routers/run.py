"""Run progress (stage, episodes today, time per episode, labels until the next PPO update and its
ETA) and the pause switch the loop reads between episodes."""

from __future__ import annotations

from datetime import UTC, datetime
from statistics import median

from fastapi import APIRouter

from operator_ui.deps import SettingsDep, StoreDep, TokenDep
from operator_ui.routers.loop import is_paused, loop_state
from operator_ui.schemas import PauseIn, RunProgressOut
from pde_storage import intents

router = APIRouter(prefix="/api/run", tags=["run"])
RECENT_EPISODES = 10  # time per episode: median over this many recent ended episodes


@router.get("")
def progress(store: StoreDep, settings: SettingsDep) -> RunProgressOut:
    loop, _, alive = loop_state(store, settings.service_stale_s)
    midnight = datetime.now(UTC).astimezone().replace(hour=0, minute=0, second=0, microsecond=0)
    recent = store.episodes(newest_first=True, limit=200)
    today = sum(1 for e in recent if e.created_at >= midnight)
    durations = [
        (e.finished_at - e.created_at).total_seconds()
        for e in recent[: RECENT_EPISODES * 3]
        if e.finished_at is not None and e.status != "aborted"
    ][:RECENT_EPISODES]
    per_episode_s = median(durations) if durations else None
    until = loop.get("labels_until_update") if alive else None
    return RunProgressOut(
        paused=is_paused(store),
        loop_phase=str(loop.get("phase", "")) if alive else "not running",
        stages={t.name: store.task_state(t.name).stage for t in store.tasks()},
        episodes_today=today,
        episode_s=per_episode_s,
        labels_until_update=until if isinstance(until, int) else None,
        update_eta_s=until * per_episode_s if isinstance(until, int) and per_episode_s else None,
        training=bool(alive and loop.get("training")),
        auto_start=bool(loop.get("auto_start")),
        auto_label=bool(loop.get("auto_label")),
    )


@router.post("/pause", dependencies=[TokenDep])
def pause(body: PauseIn, store: StoreDep) -> dict[str, bool]:
    """paused=true: the loop finishes the episode in hand and waits; false: it goes on."""
    store.set_service_state(intents.RUN_CONTROL, {"paused": body.paused, "by": "operator page"})
    return {"paused": body.paused}
