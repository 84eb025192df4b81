"""What the services publish about themselves in the shared database's ``service_states`` table,
as typed messages: the episode loop's state, the supervisor's state, the page's run control and
who may take over from the policy.

Writers build a Struct and store ``encode_state(s)``; readers call ``decode_state(row, T)``, which
returns None for a row it cannot read (no phase, an unknown phase, a field of the wrong type):
treated as absent, as if the service had not written yet. Unknown fields are ignored.

The page's JavaScript and CSS compare phases with these values; a test
(tests/operator_ui/test_phase_names.py) fails when they name a phase this module does not.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal, TypeVar

import msgspec

from pde_contract.codec import convert

# Names of the rows in the service_states table.
LOOP_ROW = "loop"
SUPERVISOR_ROW = "supervisor"
# page -> loop: a switch, not an intent: read before each episode.
RUN_CONTROL_ROW = "_run_control"
# loop -> page: who may take over from the policy (learner/loop/takeover.py).
TAKEOVER_ROW = "takeover"
# page -> loop: the page's keys and gamepad while it holds a takeover (PDE_TELEOP_PERSON=page).
PAGE_TELEOP_ROW = "teleop_page"


class LoopPhase(StrEnum):
    """What the episode loop does now (the page shows the value)."""

    STARTING = "starting"
    STOPPED = "stopped"
    WAITING_FOR_POLICY = "waiting_for_policy"  # no checkpoint yet: `pde learner sft` first
    PAUSED = "paused"
    WAITING_FOR_SUPERVISOR = "waiting_for_supervisor"
    RESETTING = "resetting"
    AWAITING_START = "awaiting_start"
    RUNNING = "running"
    ROBOT_ERROR = "robot_error"
    AWAITING_LABEL = "awaiting_label"


# While the loop resets or runs an episode it moves the arm itself: a page reset then would fight it.
LOOP_MOVES_ARM = frozenset({LoopPhase.STARTING, LoopPhase.RESETTING, LoopPhase.RUNNING})


class LastStart(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the loop did with the last Start from the page: started an episode or refused."""

    intent_id: int
    episode_id: int | None = None
    refused: str | None = None
    """why the Start was refused (the robot's state); None when an episode started"""


class LoopState(msgspec.Struct, kw_only=True):
    """The episode loop's row (``LOOP_ROW``), rewritten at each phase and by its heartbeat. Every
    field but the phase has a default, so a partial row (an older version's) still decodes."""

    phase: LoopPhase
    pid: int = 0
    policy_version: int = 0
    training: bool = False
    """a PPO update runs in the background"""
    auto_start: bool = False
    auto_label: bool = False
    last_error: str = ""
    last_start: LastStart | None = None
    batch_size: int | None = None
    labels_until_update: int | None = None
    """labelled RL episodes still needed for the next PPO update; None without a trainer"""
    detail: str | None = None
    """why the loop waits (paused, waiting_for_supervisor)"""
    episode_id: int | None = None
    """the episode running or awaiting its label"""
    # The plan of the episode in hand (from resetting on).
    task: str | None = None
    canonical_prompt: str | None = None
    prompt: str | None = None
    prompt_id: int | None = None
    stage: str | None = None
    why: str | None = None
    seed: int | None = None
    practice: bool = False
    """the episode in hand is a practice one (the page's practice switch): nothing of it is stored;
    its ``episode_id`` is negative, never a stored episode's"""
    started_at_s: float | None = None
    """wall-clock time a practice episode started (a stored one has its row's created_at)"""


SupervisorPhase = Literal["running", "stopped"]


class SupervisorState(msgspec.Struct, kw_only=True):
    """The supervisor's row (``SUPERVISOR_ROW``), rewritten by its poll loop and heartbeat. Every
    field but the phase has a default, so a partial row (an older version's) still decodes."""

    phase: SupervisorPhase
    proposer: str = ""
    eta: float | None = None
    """the success-rate threshold; the page flags rejected prompts whose labels now reach it"""
    iterations_t0: int | None = None
    candidates_k: int | None = None
    pool_min_m: int | None = None
    """the pool rule's T0, K and M_min as this supervisor runs them (the page's PPO ETA counts the
    bootstrap with them; None from a supervisor that does not say)"""
    vlm_available: bool = False
    last_vlm_error: str = ""
    inflight: list[str] = msgspec.field(default_factory=list)
    """VLM jobs under way, "kind:key" """
    confusion: dict[str, Any] = msgspec.field(default_factory=dict)
    """how often the VLM's proposal matched the operator's label (scoring.Confusion.as_dict)"""
    analysis: dict[str, str] = msgspec.field(default_factory=dict)
    """task -> the VLM's last analysis"""
    polls: int = 0
    vlm_ok: int = 0
    vlm_failed: int = 0
    fallbacks: int = 0
    errors: int = 0
    poll_running_s: float = 0.0
    """how long the poll in progress has run; 0 between polls"""
    last_poll_end_time: float = 0.0
    time: float = 0.0


# The services that publish a state row, and its message.
SERVICE_STATES: dict[str, type[LoopState] | type[SupervisorState]] = {
    LOOP_ROW: LoopState,
    SUPERVISOR_ROW: SupervisorState,
}


class RunControl(msgspec.Struct, kw_only=True):
    """The page's pause / practice switch (``RUN_CONTROL_ROW``). While paused the loop finishes
    the episode in hand and waits before the next reset. In practice it runs practice episodes
    (reset, Start, the policy, takeovers) and records none of them (learner/loop/core.py)."""

    paused: bool = False
    practice: bool = False
    by: str = ""


class TakeoverState(msgspec.Struct, kw_only=True):
    """Who may take over from the policy (``TAKEOVER_ROW``), written by the loop's actor wrapper
    at start. The page offers "take control" only with a person, and only while the loop whose
    pid this is runs (a row of an earlier loop process does not count)."""

    pid: int
    person: str | None = None
    """the person source's name (PDE_TELEOP_PERSON, teleop/settings.py); None: nobody"""


class PageTeleopState(msgspec.Struct, kw_only=True):
    """The page's newest teleop command while it holds a takeover (``PAGE_TELEOP_ROW``), written by
    the page's server (operator_ui/routers/teleop.py) at each command, read once per control tick
    by the loop's page person (learner/loop/takeover.py: StorePageCommands; teleop/page.py)."""

    seq: str
    """changes with every command: the loop stamps a new one with its own clock (its watchdog)"""
    axes: list[float]
    """x, y, z, rx, ry, rz deflections in [-1, 1], robot base frame"""
    gripper_presses: int
    """gripper presses since the page loaded"""
    end_presses: int
    """hand-back presses since the page loaded"""
    device: str = ""
    """keyboard, or gamepad: <the browser's id of the pad>"""


ServiceMessage = LoopState | SupervisorState | RunControl | TakeoverState | PageTeleopState


def encode_state(state: ServiceMessage) -> dict[str, Any]:
    """The JSON object stored in the row."""
    out: dict[str, Any] = msgspec.to_builtins(state)
    return out


State = TypeVar("State", bound=msgspec.Struct)


def decode_state(row: dict[str, Any] | None, kind: type[State]) -> State | None:
    """A stored row as ``kind``; None when absent or unreadable (written by an older version)."""
    if row is None:
        return None
    try:
        return convert(row, kind)
    except msgspec.ValidationError:
        return None
