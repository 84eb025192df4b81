"""The page's teleop and record routes (operator_ui/routers/teleop.py) without a browser: commands
go only to whoever holds control (the page's record session, or the running loop's page person,
through the database), every refusal says why and changes nothing."""

from __future__ import annotations

from fastapi.testclient import TestClient

from pde_contract.service_state import PAGE_TELEOP_ROW, TAKEOVER_ROW
from pde_storage import Store
from tests.operator_ui.conftest import AUTH
from tests.operator_ui.test_api import _episode

LOOP_PID = 4343
STILL = {"axes": [0, 0, 0, 0, 0, 0], "gripper_presses": 0, "end_presses": 0}


def test_commands_go_only_to_whoever_holds_control(client: TestClient, store: Store) -> None:
    assert client.post("/api/teleop/command", json=STILL).status_code == 401
    t = client.get("/api/teleop").json()
    assert t["holder"] is None and t["watchdog_ms"] >= 2 * t["send_period_ms"] and 0 <= t["deadband"] < 1
    r = client.post("/api/teleop/command", json=STILL, headers=AUTH)
    assert r.status_code == 409 and "holds no control" in r.text and "nothing was sent" in r.text
    bad = {**STILL, "axes": [0, 0, 3, 0, 0, 0]}
    r = client.post("/api/teleop/command", json=bad, headers=AUTH)
    assert r.status_code == 422 and "[-1, 1]" in r.text

    # the running loop's person is the page: the command goes into the row its source reads
    running = _episode(store, finish=False)
    store.set_service_state("loop", {"phase": "running", "episode_id": running, "pid": LOOP_PID})
    store.set_service_state(TAKEOVER_ROW, {"person": "page", "pid": LOOP_PID})
    assert client.get("/api/teleop").json()["holder"] == "takeover"
    sent = {**STILL, "axes": [1, 0, 0, 0, 0, -0.5], "gripper_presses": 2, "device": "gamepad: FakePad"}
    r = client.post("/api/teleop/command", json=sent, headers=AUTH)
    assert r.status_code == 200 and r.json() == {"to": "takeover"}
    row = store.service_states()[PAGE_TELEOP_ROW].state
    assert row["axes"] == [1, 0, 0, 0, 0, -0.5] and row["gripper_presses"] == 2 and row["seq"]
    client.post("/api/teleop/command", json=STILL, headers=AUTH)
    assert store.service_states()[PAGE_TELEOP_ROW].state["seq"] != row["seq"]


def test_the_record_session_refuses_steps_out_of_order(client: TestClient, store: Store) -> None:
    r = client.get("/api/record").json()
    assert r["phase"] == "idle" and r["last"] is None and "put_bowl_on_top_rack" in r["tasks"]
    for step, body in (("start", None), ("stop", None), ("save", {"keep": True, "note": ""})):
        r = client.post(f"/api/record/{step}", json=body, headers=AUTH)
        assert r.status_code == 409 and "the session is idle" in r.text and "nothing was changed" in r.text
    r = client.post("/api/record/reset", json={"task": "wipe_the_table"}, headers=AUTH)
    assert r.status_code == 422 and "put_bowl_on_top_rack" in r.text
    running = _episode(store, finish=False)
    store.set_service_state("loop", {"phase": "running", "episode_id": running, "pid": LOOP_PID})
    r = client.post("/api/record/reset", json={"task": "put_bowl_on_top_rack"}, headers=AUTH)
    assert r.status_code == 409 and "the loop moves the arm" in r.text
    assert client.get("/api/record").json()["phase"] == "idle"
    assert client.get("/api/record/video/external").status_code == 404
