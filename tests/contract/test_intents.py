"""The intents between the services: every kind round-trips through its stored (kind, payload)
form, and a row this version cannot read raises an error that says what is wrong."""

from __future__ import annotations

import json

import pytest

from pde_contract.intents import (
    INTENT_KINDS,
    AbortEpisode,
    EndEpisode,
    IntentBase,
    IntentError,
    StartEpisode,
    TakeControl,
    decode_intent,
    encode_intent,
    kind_of,
)

EXAMPLES: list[IntentBase] = [
    StartEpisode(task="pick_cube"),
    AbortEpisode(episode_id=3),
    AbortEpisode(),
    EndEpisode(episode_id=4, success=False),
    TakeControl(episode_id=5, by="operator page"),
]


@pytest.mark.parametrize("intent", EXAMPLES, ids=repr)
def test_each_kind_round_trips_through_its_row(intent: IntentBase) -> None:
    kind, payload = encode_intent(intent)
    assert kind == kind_of(type(intent)) and "kind" not in payload  # the tag is the kind column
    assert decode_intent(kind, json.loads(json.dumps(payload)), type(intent)) == intent


def test_every_kind_has_an_example() -> None:
    assert {kind_of(type(i)) for i in EXAMPLES} == set(INTENT_KINDS)


def test_rows_from_before_the_messages_still_read() -> None:
    """Payloads as the dict-writing version stored them (fields left out, extra fields)."""
    assert decode_intent("start_episode", {}, StartEpisode) == StartEpisode()
    assert decode_intent("abort_episode", {"episode_id": None}, AbortEpisode) == AbortEpisode()
    end = decode_intent("end_episode", {"episode_id": 7, "success": True, "later_field": 1}, EndEpisode)
    assert end == EndEpisode(episode_id=7, success=True)


def test_unreadable_rows_say_what_is_wrong() -> None:
    with pytest.raises(IntentError, match=r"unknown intent kind 'open_gripper'; this version knows \["):
        decode_intent("open_gripper", {}, StartEpisode)
    with pytest.raises(IntentError, match="kind 'prompt_rollouts_done' is retired: the supervisor"):
        decode_intent("prompt_rollouts_done", {"task": "t", "prompt_id": 1, "n_episodes": 2}, StartEpisode)
    with pytest.raises(IntentError, match="an intent of kind 'abort_episode' was read as 'start_episode'"):
        decode_intent("abort_episode", {}, StartEpisode)
    with pytest.raises(IntentError, match=r"malformed 'take_control' .*missing required field `episode_id`"):
        decode_intent("take_control", {"by": "page"}, TakeControl)
    with pytest.raises(IntentError, match=r"Expected `int \| null`, got `str` - at `\$.episode_id`"):
        decode_intent("abort_episode", {"episode_id": "6"}, AbortEpisode)
