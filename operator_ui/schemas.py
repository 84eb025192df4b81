"""JSON shapes of the page's API (rows from the store with file paths turned into URLs)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pde_storage import EpisodeRow, LabelRow, PromptRow


class LabelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    success: bool
    reason: str = Field("", max_length=500)
    operator: str = Field("", max_length=100, description="who labels (set once per browser)")


class DiscardIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=500, description="why, e.g. 'bad reset'")


class NoteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: str = Field(max_length=5000)


class EStopIn(BaseModel):
    reason: str = "operator pressed e-stop on the page"


class EStopOut(BaseModel):
    estopped: bool
    reason: str = ""


class ResetGuideOut(BaseModel):
    instructions: str  # the lab's steps for this task (tasks file: reset_instructions); "" if none
    instructions_file: str  # where to write them: the tasks file (PDE_TASKS_FILE); "" when none is set
    reference_episode_id: int | None  # the last ended episode of the task
    reference_video: str | None  # its video; the page shows its first frame (the start scene)


class PauseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paused: bool
    practice: bool = Field(False, description="practice mode: paused, and nothing is recorded")


class EndIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    success: bool | None = Field(description="the operator's verdict, sent as the label once it ended")


class RunProgressOut(BaseModel):
    paused: bool
    practice: bool  # practice mode: paused, the page refuses whatever would record something
    loop_phase: str
    stages: dict[str, str]  # task -> bootstrap | rl
    episodes_today: int  # created since local midnight (of the page's server)
    episodes_target: int | None  # UISettings.episodes_target; None: no target
    target_eta_s: float | None  # (target - today) x cycle_s
    episode_s: float | None  # median wall time of recent ended episodes
    cycle_s: float | None  # median start-to-start of recent episodes: reset, Start and label included
    labels_until_update: int | None  # labelled RL episodes still needed for the next PPO batch
    update_episodes: int | None  # fewest episodes before the next PPO update, bootstrap included
    update_episodes_max: int | None  # most (the whole bootstrap search budget); None: no bound
    update_eta_s: float | None  # update_episodes x cycle_s
    update_eta_max_s: float | None  # update_episodes_max x cycle_s
    update_why: str  # what the count is made of
    training: bool  # a PPO update is running
    auto_start: bool
    auto_label: bool


class PPOUpdateMark(BaseModel):
    version: int  # the policy version the update made
    trained_through_episode_id: int  # the newest episode in its batch (x on the episode-# plots)
    labelled_episodes: int  # labelled episodes of the task by then (x on the α / pool plots)


class VersionSuccess(BaseModel):
    version: int
    n_episodes: int  # labelled episodes of the task run by this policy version
    success_rate: float


class CurvesOut(BaseModel):
    canonical_success: list[list[float]]  # [episode id, moving success rate]
    canonical_window: int  # episodes in that moving rate
    prompt_success: dict[str, list[list[float]]]  # prompt text -> [episode id, cumulative rate]
    alpha: list[list[float]]  # [labelled episodes so far, alpha]
    pool_size: list[list[float]]  # [labelled episodes so far, pool size]
    ppo_updates: list[PPOUpdateMark]  # markers on the plots
    success_by_version: list[VersionSuccess]


class CamerasOut(BaseModel):
    cameras: list[str]
    age_s: float | None  # since the newest observation arrived; None before the first
    frame_age_s: dict[str, float]  # per camera, capture delay included
    stale: bool  # no observation newer than UISettings.frame_stale_s
    error: str
    estopped: bool | None
    fault: str  # the robot server's fault, when it reports one
    task_success: bool | None
    ee_position_m: list[float]
    gripper_width_m: float | None
    episode_id: str


def episode_json(e: EpisodeRow) -> dict[str, Any]:
    return {
        "id": e.id,
        "task": e.task,
        "rollout_prompt": e.rollout_prompt,
        "canonical_prompt": e.canonical_prompt,
        "prompt_id": e.prompt_id,
        "policy_version": e.policy_version,
        "stage": e.stage,
        "status": e.status,
        "success": e.success,
        "vlm_proposal": e.vlm_proposal,
        "vlm_reason": e.vlm_reason,
        "videos": {cam: f"/api/episodes/{e.id}/video/{cam}" for cam in sorted(e.video_paths)},
        "created_at": e.created_at.isoformat(),
        "finished_at": e.finished_at.isoformat() if e.finished_at else None,
        "labelled_at": e.labelled_at.isoformat() if e.labelled_at else None,
        "abort_reason": e.abort_reason,
        "seed": e.seed,
        "n_chunks": e.n_chunks,
        "discarded_at": e.discarded_at.isoformat() if e.discarded_at else None,
        "discard_reason": e.discard_reason,
        "note": e.note,
    }


def label_json(lab: LabelRow) -> dict[str, Any]:
    return {
        "id": lab.id,
        "episode_id": lab.episode_id,
        "success": lab.success,
        "source": lab.source,
        "reason": lab.reason,
        "authoritative": lab.authoritative,
        "created_at": lab.created_at.isoformat(),
        "operator": lab.operator,
    }


def prompt_json(p: PromptRow) -> dict[str, Any]:
    return {
        "id": p.id,
        "task": p.task,
        "text": p.text,
        "status": p.status,
        "source": p.source,
        "iteration": p.iteration,
        "summary": p.summary,
        "n_episodes": p.n_episodes,
        "n_success": p.n_success,
        "n_finished": p.n_finished,
        "success_rate": p.success_rate,
    }


# --- teleoperation and recording from the page (operator_ui/routers/teleop.py) -------------------


class TeleopCommandIn(BaseModel):
    """The page's keys and gamepad as it holds control (teleop/page.py: PageCommand)."""

    model_config = ConfigDict(extra="forbid")
    axes: list[float] = Field(min_length=6, max_length=6, description="x, y, z, rx, ry, rz in [-1, 1]")
    gripper_presses: int = Field(ge=0, description="gripper presses since the page loaded")
    end_presses: int = Field(ge=0, description="'hand back' presses since the page loaded")
    device: str = Field("keyboard", max_length=200, description="keyboard, or gamepad: <its id>")


class TeleopOut(BaseModel):
    """The one teleop configuration the page needs (TeleopSettings), and who holds control."""

    send_period_ms: int
    watchdog_ms: int
    deadband: float
    max_speed_m_s: float
    max_rotation_rad_s: float
    holder: str | None  # "record" (a page take records), "takeover" (the loop's page person), None


class RecordResetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str = Field(min_length=1, max_length=200)
    seed: int | None = Field(None, description="sim: the scene's seed (None: the simulator's choice)")


class RecordSaveIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keep: bool
    note: str = Field("", max_length=2000)


class TaskCounts(BaseModel):
    kept: int
    discarded: int


class LastTakeOut(BaseModel):
    task: str
    rows: int
    rows_dropped: int
    rows_clipped: int
    watchdog_stops: int
    task_success: bool | None
    videos: dict[str, str]  # camera -> URL of the take's video
    kept: bool | None  # None: waits for keep or discard
    files: list[str]


class RecordOut(BaseModel):
    phase: str  # idle | resetting | ready | recording | recorded
    task: str | None
    rows: int
    error: str
    last: LastTakeOut | None
    demos_dir: str
    counts: dict[str, TaskCounts]
    tasks: list[str]  # what can be recorded: the tasks file's (or the built-in ten)
