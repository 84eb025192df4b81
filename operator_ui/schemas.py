"""JSON shapes of the page's API: what it accepts (``...In``) and what it answers (``...Out``,
each endpoint's response model, so /api/docs shows real schemas). The answers are built from the
store's rows and the services' typed messages; a message the page passes on whole (the loop's and
the supervisor's state) and the rows it shows whole (episodes, labels, prompts) get their models
from the record's own fields (``record_model``).
tests/operator_ui/test_page_fields.py fails when app.js reads a field no model has."""

from __future__ import annotations

import dataclasses
import types
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, Self, TypeAlias, Union, get_args, get_origin, get_type_hints

import msgspec
from pydantic import BaseModel, ConfigDict, Field, create_model

from pde_contract.records import Stage
from pde_contract.service_state import LoopPhase, LoopState, SupervisorState
from pde_storage import EpisodeRow, LabelRow, PromptRow


def _pydantic_type(tp: Any) -> Any:
    """``tp`` with every msgspec Struct in it replaced by its ``struct_model``."""
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return struct_model(tp)
    origin, args = get_origin(tp), get_args(tp)
    if origin is None or origin is Literal or not args:
        return tp
    mapped = tuple(_pydantic_type(a) for a in args)
    return Union[mapped] if origin in (Union, types.UnionType) else origin[mapped]  # noqa: UP007


def _record_fields(record: type) -> dict[str, tuple[Any, Any]]:
    """name -> (type, pydantic default) of a msgspec message or a row dataclass."""
    out: dict[str, tuple[Any, Any]] = {}
    if issubclass(record, msgspec.Struct):
        for f in msgspec.structs.fields(record):
            if f.default_factory is not msgspec.NODEFAULT:
                out[f.encode_name] = (f.type, Field(default_factory=f.default_factory))
            else:
                out[f.encode_name] = (f.type, ... if f.default is msgspec.NODEFAULT else f.default)
        return out
    if not dataclasses.is_dataclass(record):
        raise TypeError(f"{record.__name__} is neither a msgspec Struct nor a dataclass")
    hints = get_type_hints(record)
    for d in dataclasses.fields(record):
        if d.default_factory is not dataclasses.MISSING:
            out[d.name] = (hints[d.name], Field(default_factory=d.default_factory))
        else:
            out[d.name] = (hints[d.name], ... if d.default is dataclasses.MISSING else d.default)
    return out


def record_model(
    record: type,
    name: str,
    *,
    exclude: tuple[str, ...] = (),
    fields: dict[str, tuple[Any, Any]] | None = None,
) -> type[BaseModel]:
    """A pydantic model with the fields, types and defaults of a typed record (a msgspec message
    or one of the store's rows), less ``exclude``, with ``fields`` (name -> (type, default)) added
    or retyped: the record stays the one home of its fields."""
    own = {k: (_pydantic_type(t), d) for k, (t, d) in _record_fields(record).items() if k not in exclude}
    definitions: dict[str, Any] = {**own, **(fields or {})}
    return create_model(
        name, __doc__=record.__doc__, __config__=ConfigDict(from_attributes=True), **definitions
    )


@cache
def struct_model(struct: type[msgspec.Struct]) -> type[BaseModel]:
    """A message's ``record_model`` (one per message: nested ones are shared)."""
    return record_model(struct, f"{struct.__name__}Out")


def state_out(message: msgspec.Struct) -> BaseModel:
    """A message as its ``struct_model``."""
    return struct_model(type(message)).model_validate(msgspec.to_builtins(message))


# Built at import from the records; mypy sees plain models.
if TYPE_CHECKING:
    LoopStateOut: TypeAlias = BaseModel
    SupervisorStateOut: TypeAlias = BaseModel
    EpisodeFields: TypeAlias = BaseModel
    LabelOut: TypeAlias = BaseModel
    PromptFields: TypeAlias = BaseModel
else:
    LoopStateOut = struct_model(LoopState)
    SupervisorStateOut = struct_model(SupervisorState)
    # The row's file paths stay on the server: the page gets the videos as URLs.
    EpisodeFields = record_model(
        EpisodeRow,
        "EpisodeFields",
        exclude=("file_path", "video_paths"),
        fields={"videos": (dict[str, str], ...)},
    )
    LabelOut = record_model(LabelRow, "LabelOut", fields={"authoritative": (bool, ...)})
    PromptFields = record_model(PromptRow, "PromptFields", fields={"success_rate": (float | None, ...)})


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
    practice: bool = Field(
        False, description="practice mode: the loop runs episodes and records none of them (pause is off)"
    )


class EndIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    success: bool | None = Field(description="the operator's verdict, sent as the label once it ended")


class RunProgressOut(BaseModel):
    paused: bool
    practice: bool  # practice mode: episodes run and nothing is stored; labels and discards refused
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


class EpisodeOut(EpisodeFields):
    """An episode as the page shows it (``EpisodeRow``): its videos as URLs (camera -> URL of
    its mp4), never the files' paths."""

    @classmethod
    def of(cls, e: EpisodeRow, **more: Any) -> Self:
        """From the store's row; ``more``: the fields a subclass adds."""
        videos = {cam: f"/api/episodes/{e.id}/video/{cam}" for cam in sorted(e.video_paths)}
        return cls.model_validate({**vars(e), "videos": videos, **more})


class PPOUseOut(BaseModel):
    """The first PPO update that trained on an episode's label."""

    version: int
    trained_through_episode_id: int
    at: datetime


class EpisodeDetailOut(EpisodeOut):
    labels: list[LabelOut]  # oldest first, relabels included
    ppo_used: PPOUseOut | None


class LabelledOut(BaseModel):
    label: LabelOut
    episode: EpisodeOut


class PromptOut(PromptFields):
    """A prompt (``PromptRow``) with its success rate."""

    rejudge: str = ""  # a rejected prompt whose labels now reach eta: what the operator may do


class TaskOut(BaseModel):
    name: str
    canonical_prompt: str
    stage: Stage
    iteration: int
    alpha: float
    ema_success: float | None
    pool_size: int


class IntentOut(BaseModel):
    """A request queued for a service; what it did with it comes back in its state."""

    intent_id: int


class StartOut(IntentOut):
    task: str | None
    prompt: str | None


class AbortOut(IntentOut):
    episode_id: int | None


class EndOut(IntentOut):
    episode_id: int
    success: bool | None


class TakeControlOut(IntentOut):
    episode_id: int
    person: str


class LoopOut(LoopStateOut):
    """The loop's state (its ``LoopState``) as the page reads it, with its age and whether it is
    alive; without a state (the loop never wrote one this version reads) the phase is None."""

    phase: LoopPhase | None = None
    age_s: float | None = None
    alive: bool = False
    person: str | None = None  # who may take over (learner/loop/takeover.py); None: nobody


class RunningOut(BaseModel):
    episode_id: int
    elapsed_s: float
    chunks: int | None  # counted from the robot server's observations; None: it saw none of them
    practice: bool = False  # a practice episode: nothing of it is stored (its id is negative)


class PracticeEpisodeOut(BaseModel):
    """The loop's practice episode (the page's practice switch): no row exists, so what there is
    comes from the loop's state; its id is negative, never a stored episode's."""

    id: int
    task: str | None
    rollout_prompt: str | None
    canonical_prompt: str | None
    practice: bool = True


class VLMOut(BaseModel):
    """Whether a VLM proposal can still come: "VLM: —" alone cannot tell waiting from none."""

    supervisor_running: bool
    available: bool
    proposer: str


class StateOut(BaseModel):
    loop: LoopOut
    episode: EpisodeOut | None  # the loop's own episode (running or awaiting its label)
    practice_episode: PracticeEpisodeOut | None = None  # the loop's practice episode, instead
    running: RunningOut | None
    awaiting_label: EpisodeOut | None  # the episode the page asks the operator to label
    frame_stale_s: float
    label_undo_s: float
    vlm: VLMOut


class PauseOut(BaseModel):
    paused: bool
    practice: bool


class HomeOut(BaseModel):
    task: str
    seed: int | None
    pose: str  # "home" or "the task's reset pose"


class RobotStatusOut(BaseModel):
    backend: str
    connected: bool
    estopped: bool
    estop_reason: str
    episode_id: str
    holding: bool
    steps_remaining: int
    task: str
    last_error: str
    fault: str  # "" without a fault, else what happened and what to do
    fault_blocking: bool
    guiding: bool


class MetricPointOut(BaseModel):
    step: int
    value: float
    time: datetime


class OkOut(BaseModel):
    ok: bool


class ServiceHealthOut(BaseModel):
    ok: bool
    detail: str


class RobotHealthOut(ServiceHealthOut):
    estopped: bool | None
    fault: str
    fault_blocking: bool
    guiding: bool
    estop_reason: str
    limits: str


class ServiceStateHealthOut(ServiceHealthOut):
    state: LoopStateOut | SupervisorStateOut  # the service's own row


class ProblemOut(BaseModel):
    """One banner line: which service, what is wrong, and how to start it again."""

    service: str
    title: str
    what: str
    action: str


class HealthOut(BaseModel):
    services: dict[str, RobotHealthOut | ServiceStateHealthOut | ServiceHealthOut]
    problems: list[ProblemOut]


# --- teleoperation and recording from the page (operator_ui/routers/teleop.py) -------------------


class TeleopCommandIn(BaseModel):
    """The page's keys and gamepad as it holds control (teleop/page.py: PageCommand)."""

    model_config = ConfigDict(extra="forbid")
    axes: list[float] = Field(min_length=6, max_length=6, description="x, y, z, rx, ry, rz in [-1, 1]")
    gripper_presses: int = Field(ge=0, description="gripper presses since the page loaded")
    end_presses: int = Field(ge=0, description="'hand back' presses since the page loaded")
    device: str = Field("keyboard", max_length=200, description="keyboard, or gamepad: <its id>")


class TeleopCommandOut(BaseModel):
    to: Literal["record", "takeover"]  # who drives with it: the page's take, or the loop's page person


class RecordStepOut(BaseModel):
    phase: str  # what the session does now (GET /api/record says when it is done)
    task: str | None = None


class RecordSaveOut(BaseModel):
    kept: bool
    files: list[str]  # the ee_delta take first, then its joint_abs twin


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
