"""The services' state rows: what the loop and the supervisor write decodes back unchanged, and
rows an older version wrote decode or count as absent."""

from __future__ import annotations

import json

from pde_contract.service_state import (
    LastStart,
    LoopPhase,
    LoopState,
    RunControl,
    SupervisorState,
    TakeoverState,
    decode_state,
    encode_state,
)


def test_loop_state_round_trips_through_json() -> None:
    state = LoopState(
        phase=LoopPhase.AWAITING_START,
        pid=7,
        policy_version=3,
        training=True,
        last_start=LastStart(intent_id=4, refused="the E-STOP is latched"),
        batch_size=8,
        labels_until_update=2,
        task="pick_cube",
        prompt_id=5,
        seed=11,
    )
    row = json.loads(json.dumps(encode_state(state)))
    assert row["phase"] == "awaiting_start"
    assert row["last_start"] == {"intent_id": 4, "refused": "the E-STOP is latched"}
    assert decode_state(row, LoopState) == state


def test_old_and_partial_rows() -> None:
    old = decode_state({"phase": "running", "task": "t", "no_longer_written": 1}, LoopState)
    assert old is not None and old.phase is LoopPhase.RUNNING and old.task == "t" and old.episode_id is None
    assert decode_state({"phase": "a_phase_no_more"}, LoopState) is None
    assert decode_state({"task": "t"}, LoopState) is None
    assert decode_state({"phase": "running", "episode_id": "seven"}, LoopState) is None
    assert decode_state(None, LoopState) is None
    assert decode_state({"phase": "idle"}, SupervisorState) is None
    sup = decode_state({"phase": "running", "eta": 0.1, "polls": 3}, SupervisorState)
    assert sup is not None and sup.eta == 0.1 and sup.polls == 3 and sup.inflight == []


def test_run_control_has_one_paused() -> None:
    assert decode_state({"paused": True}, RunControl) == RunControl(paused=True)
    assert encode_state(RunControl(paused=True, practice=True, by="operator page")) == {
        "paused": True,
        "practice": True,
        "by": "operator page",
    }


def test_takeover_state_names_its_loop() -> None:
    row = json.loads(json.dumps(encode_state(TakeoverState(pid=42, person="spacemouse"))))
    assert row == {"pid": 42, "person": "spacemouse"}
    assert decode_state(row, TakeoverState) == TakeoverState(pid=42, person="spacemouse")
    assert decode_state({"pid": 42}, TakeoverState) == TakeoverState(pid=42)  # nobody may take over
    assert decode_state({"person": "spacemouse"}, TakeoverState) is None  # whose loop? none: absent
