"""Intents: one-shot requests one service makes of another through the shared database's
``intents`` table, as tagged messages. Each is consumed by exactly one reader.

The row's ``kind`` column is the message's tag and its ``payload`` the other fields
(``encode_intent``); ``decode_intent`` reads them back and raises ``IntentError`` saying what was
wrong. The store marks such a row failed with that reason and logs it (never drops it silently).
Unknown payload fields are ignored, so an older reader takes a newer writer's intent.

Pause and practice are not intents but a switch read before each episode:
``pde_contract.service_state.RunControl``. Nor is "a candidate has its N rollouts": the supervisor
reads that from the store (the loop's N on the task row, the prompt's counts over the bootstrap
stage), so there is one signal for it.
"""

from __future__ import annotations

from typing import Any, TypeVar, get_args

import msgspec

from pde_contract.codec import convert


class IntentError(ValueError):
    """A stored intent this version cannot read: an unknown kind or a payload of the wrong shape."""


class IntentBase(msgspec.Struct, tag_field="kind", kw_only=True, frozen=True):
    """The tag is stored in the row's ``kind`` column, not in its payload."""


class StartEpisode(IntentBase, tag="start_episode", frozen=True):
    """page -> loop: the operator reset the scene; start the prepared episode now."""

    by: str = "operator page"
    task: str | None = None
    """the task the page showed when the operator pressed Start (for the log)"""


class AbortEpisode(IntentBase, tag="abort_episode", frozen=True):
    """page -> loop: stop the running episode; the robot holds and the episode is stored as
    aborted with a reason."""

    episode_id: int | None = None


class EndEpisode(IntentBase, tag="end_episode", frozen=True):
    """page -> loop: end the running episode now and keep it (not an abort): the robot holds, the
    episode is stored and awaits its label like any other. Taken by
    learner.loop.takeover.TakeoverActor, between and during chunks."""

    episode_id: int
    success: bool | None = None
    """the operator's verdict, sent by the page as the label once the episode has ended; None: none"""
    by: str = "operator page"


class TakeControl(IntentBase, tag="take_control", frozen=True):
    """page -> loop: a person takes over the running episode now (the configured teleop source
    drives until it ends the take; then the policy goes on). Taken by TakeoverActor, which the
    actor asks at every poll while the policy drives."""

    episode_id: int
    by: str = "operator page"


# Every kind: a new intent is added here, and so becomes known to every reader.
Intent = StartEpisode | AbortEpisode | EndEpisode | TakeControl
IntentT = TypeVar("IntentT", bound=IntentBase)


def kind_of(kind: type[IntentBase]) -> str:
    """The tag of an intent type: the value of its rows' ``kind`` column."""
    tag = kind.__struct_config__.tag
    if not isinstance(tag, str):
        raise TypeError(f"{kind.__name__} is not an intent message (no tag)")
    return tag


INTENT_KINDS: dict[str, type[IntentBase]] = {kind_of(k): k for k in get_args(Intent)}
# Kinds an earlier version wrote and no reader takes now, with why: a row left pending across the
# upgrade is marked failed with this reason.
RETIRED_KINDS: dict[str, str] = {
    "prompt_rollouts_done": "the supervisor reads a candidate's N rollouts from the store (the task "
    "row's N, the prompt's bootstrap counts); nothing needs to be done",
}


def encode_intent(intent: IntentBase) -> tuple[str, dict[str, Any]]:
    """(kind, payload) to store in the row."""
    payload: dict[str, Any] = msgspec.to_builtins(intent)
    return payload.pop("kind"), payload


def intent_type(kind: str) -> type[IntentBase]:
    """The message type of a stored ``kind``; IntentError for a kind this version does not know."""
    known = INTENT_KINDS.get(kind)
    if kind in RETIRED_KINDS:
        raise IntentError(f"intent kind {kind!r} is retired: {RETIRED_KINDS[kind]}")
    if known is None:
        raise IntentError(f"unknown intent kind {kind!r}; this version knows {sorted(INTENT_KINDS)}")
    return known


def decode_intent(kind: str, payload: dict[str, Any], expected: type[IntentT]) -> IntentT:
    """A stored row as ``expected``; IntentError saying what is wrong when it is not one."""
    if intent_type(kind) is not expected:
        raise IntentError(f"an intent of kind {kind!r} was read as {kind_of(expected)!r}")
    try:
        return convert({k: v for k, v in payload.items() if k != "kind"}, expected)
    except msgspec.ValidationError as e:
        raise IntentError(f"malformed {kind!r} intent payload {payload!r}: {e}") from e
