"""POST /api/loop/take-control: queued for the running episode only when the running loop has a
person source (learner/loop/takeover.py publishes it); every refusal is a clear 409 that changes
nothing, and /api/state tells the page whether to show the button."""

from __future__ import annotations

from fastapi.testclient import TestClient

from pde_contract.intents import TakeControl
from pde_contract.service_state import TAKEOVER_ROW
from pde_storage import Store
from tests.operator_ui.conftest import AUTH
from tests.operator_ui.test_api import _episode

LOOP_PID = 4242


def _refused(client: TestClient, words: str) -> None:
    r = client.post("/api/loop/take-control", headers=AUTH)
    assert r.status_code == 409 and words in r.text and "nothing was changed" in r.text, r.text


def test_take_control_needs_a_running_episode_and_a_person(client: TestClient, store: Store) -> None:
    assert client.post("/api/loop/take-control").status_code == 401
    _refused(client, "no episode is running")  # no loop at all
    running = _episode(store, finish=False)
    store.set_service_state("loop", {"phase": "awaiting_start", "pid": LOOP_PID})
    _refused(client, "no episode is running")
    store.set_service_state("loop", {"phase": "running", "episode_id": running, "pid": LOOP_PID})
    _refused(client, "no person source is configured")  # the loop published nothing
    store.set_service_state(TAKEOVER_ROW, {"person": None, "pid": LOOP_PID})
    _refused(client, "PDE_TELEOP_PERSON=spacemouse")
    assert client.get("/api/state").json()["loop"]["person"] is None
    store.set_service_state(TAKEOVER_ROW, {"person": "spacemouse", "pid": LOOP_PID + 1})
    _refused(client, "no person source is configured")  # another (earlier) loop's row
    assert store.pending_intents(TakeControl) == []

    store.set_service_state(TAKEOVER_ROW, {"person": "spacemouse", "pid": LOOP_PID})
    assert client.get("/api/state").json()["loop"]["person"] == "spacemouse"
    r = client.post("/api/loop/take-control", headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["episode_id"] == running and r.json()["person"] == "spacemouse"
    [row] = store.pending_intents(TakeControl)
    assert row.intent == TakeControl(episode_id=running, by="operator page")
    _refused(client, "already pending")
    assert len(store.pending_intents(TakeControl)) == 1
