"""The page's HTTP API on SQLite and PostgreSQL: reads, labels, intents, and bad requests that get
a clear 4xx and change nothing."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from operator_ui.app import create_app
from operator_ui.robot_link import RobotLink
from operator_ui.settings import UISettings, check_exposure
from pde_contract.intents import EndEpisode, StartEpisode
from pde_contract.service_state import RUN_CONTROL_ROW, SUPERVISOR_ROW, RunControl, SupervisorState
from pde_storage import Store
from pde_storage.service_states import write_state
from tests.helpers import free_port, pde_command, subprocess_env
from tests.operator_ui.conftest import AUTH, LOCAL, TOKEN
from tests.storage.factories import finish_with_videos, make_episode_file

TASK = "put_green_container_in_bowl"
CANON = "put the green container in the bowl"


def _episode(store: Store, finish: bool = True) -> int:
    store.ensure_task(TASK, CANON)
    ep = store.create_episode(TASK, store.prompts(TASK)[0].id, 0, "bootstrap")
    if finish:
        finish_with_videos(store, ep.id, make_episode_file(ep.id, TASK, n_chunks=3))
    return ep.id


def _snapshot(store: Store) -> list[tuple[int, str, bool | None, int]]:
    return [(e.id, e.status, e.success, len(store.labels(e.id))) for e in store.episodes()]


def test_label_then_relabel_keeps_history(client: TestClient, store: Store) -> None:
    eid = _episode(store)
    r = client.post(f"/api/episodes/{eid}/label", json={"success": True}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["episode"]["status"] == "labelled" and r.json()["episode"]["success"] is True
    r = client.post(
        f"/api/episodes/{eid}/relabel", json={"success": False, "reason": "dropped"}, headers=AUTH
    )
    assert r.status_code == 200
    detail = client.get(f"/api/episodes/{eid}").json()
    assert detail["success"] is False
    assert [(lab["source"], lab["success"]) for lab in detail["labels"]] == [
        ("operator", True),
        ("operator", False),
    ]


def test_bad_requests_get_4xx_and_change_nothing(client: TestClient, store: Store) -> None:
    done, running = _episode(store), _episode(store, finish=False)
    labelled = _episode(store)
    store.add_label(labelled, False, source="operator")
    before = _snapshot(store)
    cases = [
        (f"/api/episodes/{done}/label", {"success": True}, {}, 401, "missing token"),
        (
            f"/api/episodes/{done}/label",
            {"success": True},
            {"Authorization": "Bearer nope"},
            403,
            "wrong token",
        ),
        (f"/api/episodes/{done}/label", {"success": True}, {"X-PDE-Token": "nope"}, 403, "wrong token"),
        ("/api/episodes/99999/label", {"success": True}, AUTH, 404, "unknown episode id 99999"),
        (f"/api/episodes/{running}/label", {"success": True}, AUTH, 409, "still running"),
        (f"/api/episodes/{labelled}/label", {"success": True}, AUTH, 409, "already labelled"),
        (f"/api/episodes/{done}/label", {"success": "maybe"}, AUTH, 422, "bool"),
        (f"/api/episodes/{done}/label", {"success": True, "extra": 1}, AUTH, 422, "extra"),
        (f"/api/episodes/{done}/relabel", {"success": True}, {}, 401, "missing token"),
        ("/api/loop/start", {}, {}, 401, "missing token"),
        ("/api/loop/start", {}, AUTH, 409, "not running"),
        ("/api/loop/abort", {}, AUTH, 409, "no episode is running"),
        ("/api/robot/release", {}, {}, 401, "missing token"),
    ]
    for path, body, headers, code, words in cases:
        r = client.post(path, json=body, headers=headers)
        assert r.status_code == code, (path, r.status_code, r.text)
        assert words in r.text, (path, r.text)
    assert client.get("/api/episodes/99999").status_code == 404
    assert client.get("/api/tasks/nope/prompts").status_code == 404
    assert client.get(f"/api/episodes/{done}/video/thermal").status_code == 404
    assert _snapshot(store) == before
    assert store.pending_intents(StartEpisode) == []


def test_a_row_this_version_cannot_read_answers_500_saying_which(client: TestClient, store: Store) -> None:
    eid = _episode(store)
    with store.backend.write_engine.begin() as c:
        c.execute(text("UPDATE episodes SET status = 'done'"))
    r = client.get(f"/api/episodes/{eid}")
    assert r.status_code == 500
    assert r.json()["detail"].startswith(
        f"episodes.status of row {eid} holds 'done', not a value of EpisodeStatus"
    )


def test_start_only_while_the_loop_waits(client: TestClient, store: Store) -> None:
    store.set_service_state("loop", {"phase": "running", "task": TASK})
    r = client.post("/api/loop/start", headers=AUTH)
    assert r.status_code == 409 and "'running'" in r.text
    store.set_service_state("loop", {"phase": "awaiting_start", "task": TASK, "prompt": CANON})
    write_state(store, RUN_CONTROL_ROW, RunControl(paused=True))
    r = client.post("/api/loop/start", headers=AUTH)
    assert r.status_code == 409 and "resume run" in r.text
    write_state(store, RUN_CONTROL_ROW, RunControl(paused=False))
    r = client.post("/api/loop/start", headers=AUTH)
    assert r.status_code == 200 and r.json()["task"] == TASK
    r = client.post("/api/loop/start", headers=AUTH)
    assert r.status_code == 409 and "already pending" in r.text
    assert len(store.pending_intents(StartEpisode)) == 1
    state = client.get("/api/state").json()
    assert state["loop"]["phase"] == "awaiting_start" and state["loop"]["alive"] is True


def test_reads_history_video_pools_curves_health(client: TestClient, store: Store) -> None:
    eid = _episode(store)
    store.add_label(eid, True, source="vlm", reason="in the bowl")
    pid = store.add_prompt(TASK, "drop the green box in the bowl").id
    store.set_prompt_status(pid, "pool")
    store.add_metric(f"{TASK}/alpha", 0.4, 3)
    [e] = client.get("/api/episodes").json()
    assert e["id"] == eid and e["vlm_proposal"] is True and sorted(e["videos"]) == ["external", "wrist"]
    r = client.get(e["videos"]["wrist"])
    assert r.status_code == 200 and r.headers["content-type"] == "video/mp4" and r.content[4:8] == b"ftyp"
    r = client.get(e["videos"]["wrist"], headers={"Range": "bytes=0-99"})
    assert r.status_code == 206 and len(r.content) == 100  # seekable in the browser
    [t] = client.get("/api/tasks").json()
    assert (t["name"], t["stage"], t["pool_size"]) == (TASK, "bootstrap", 1)
    prompts = client.get(f"/api/tasks/{TASK}/prompts").json()
    assert [p["status"] for p in prompts] == ["canonical", "pool"] and prompts[0]["n_finished"] == 1
    assert client.get(f"/api/tasks/{TASK}/curves").json()["alpha"] == [[3.0, 0.4]]
    services = client.get("/api/health").json()["services"]
    assert services["database"]["ok"] is True and services["robot_server"]["ok"] is False
    assert client.get("/healthz").json() == {"ok": True}
    assert client.get("/").status_code == 200 and "E-STOP" in client.get("/").text


def test_a_rejected_prompt_is_flagged_by_the_pool_rules_counts(client: TestClient, store: Store) -> None:
    """The rejudge note reads a prompt's bootstrap counts, as the supervisor's pool rule does; the
    table shows its counts over every stage."""
    _episode(store)  # the task
    pid = store.add_prompt(TASK, "drop the green box in the bowl").id
    store.set_prompt_status(pid, "rejected")
    write_state(store, SUPERVISOR_ROW, SupervisorState(phase="running", eta=0.5))

    def labelled(stage: str, success: bool) -> int:
        ep = store.create_episode(TASK, pid, 0, stage)
        store.finish_episode(ep.id, make_episode_file(ep.id, TASK, n_chunks=2))
        store.add_label(ep.id, success, source="operator")
        return ep.id

    first = labelled("bootstrap", False)
    labelled("rl", True)
    labelled("rl", True)

    def row() -> dict[str, Any]:
        return next(p for p in client.get(f"/api/tasks/{TASK}/prompts").json() if p["id"] == pid)

    assert (row()["n_success"], row()["n_episodes"], row()["rejudge"]) == (2, 3, "")  # bootstrap: 0/1
    store.add_label(first, True, source="operator", relabel=True)
    assert row()["rejudge"].startswith("rejected, but its labels now give 1/1 = 100% >= eta 50%")


def test_estop_without_robot_server_says_so(client: TestClient) -> None:
    r = client.post("/api/robot/estop", json={})
    assert r.status_code == 503 and "robot server" in r.text and "will not run later" in r.text
    cams = client.get("/api/cameras").json()
    assert cams["stale"] is True and cams["age_s"] is None and cams["fault"] == ""


@pytest.mark.parametrize(
    ("host", "token", "ok"),
    [
        ("127.0.0.1", "", True),
        ("localhost", "", True),
        ("::1", "changeme", True),
        ("0.0.0.0", "", False),
        ("0.0.0.0", "changeme", False),
        ("192.168.1.5", "<your token>", False),
        ("0.0.0.0", "short", False),
        ("0.0.0.0", "a-long-random-token-0123456789", True),
    ],
)
def test_refuses_exposure_without_real_token(host: str, token: str, ok: bool) -> None:
    s = UISettings.model_validate({"host": host, "token": token})
    if ok:
        check_exposure(s)
    else:
        with pytest.raises(ValueError, match="refusing to bind"):
            check_exposure(s)


def test_pde_ui_refuses_to_start_exposed_with_placeholder_token() -> None:
    r = subprocess.run(
        pde_command("ui", "--host", "0.0.0.0"),
        env=subprocess_env(PDE_UI_TOKEN="changeme"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "refusing to bind 0.0.0.0" in r.stderr and "PDE_UI_TOKEN" in r.stderr


def test_token_check(client: TestClient) -> None:
    assert client.get("/api/token/check").status_code == 401
    assert client.get("/api/token/check", headers={"Authorization": "Bearer nope"}).status_code == 403
    assert client.get("/api/token/check", headers=AUTH).json() == {"ok": True}


def test_discard_restore_note_and_history_paging_filters(client: TestClient, store: Store) -> None:
    ids = [_episode(store) for _ in range(5)]
    store.add_label(ids[0], True, source="operator")
    store.add_label(ids[1], False, source="operator")
    r = client.post(f"/api/episodes/{ids[2]}/discard", json={"reason": "bad reset"}, headers=AUTH)
    assert (
        r.status_code == 200
        and r.json()["status"] == "discarded"
        and r.json()["discard_reason"] == "bad reset"
    )
    assert (
        client.post(f"/api/episodes/{ids[3]}/discard", json={"reason": ""}, headers=AUTH).status_code == 422
    )
    assert client.post(f"/api/episodes/{ids[3]}/discard", json={"reason": "x"}).status_code == 401
    r = client.put(f"/api/episodes/{ids[1]}/note", json={"note": "gripper slipped"}, headers=AUTH)
    assert r.json()["note"] == "gripper slipped"

    def page(**params: Any) -> list[int]:
        r = client.get("/api/episodes", params=params)
        assert r.status_code == 200, r.text
        return [e["id"] for e in r.json()]

    assert page(limit=2) == [ids[4], ids[3]]
    assert page(limit=2, before_id=ids[3]) == [ids[2], ids[1]]
    assert page(limit=2, before_id=ids[1]) == [ids[0]]
    assert page(label="success") == [ids[0]] and page(label="failure") == [ids[1]]
    assert page(label="none") == [ids[4], ids[3], ids[2]]
    assert page(status="discarded") == [ids[2]] and page(stage="rl") == []
    assert page(task=TASK, prompt_id=store.episode(ids[0]).prompt_id) == ids[::-1]
    assert client.get("/api/episodes", params={"stage": "warmup"}).status_code == 422
    assert client.get("/api/episodes", params={"label": "maybe"}).status_code == 422
    r = client.post(f"/api/episodes/{ids[2]}/restore", headers=AUTH)
    assert r.json()["status"] == "awaiting_label" and r.json()["discarded_at"] is None
    assert client.post(f"/api/episodes/{ids[2]}/restore", headers=AUTH).status_code == 409


def test_health_lists_each_down_service_with_the_command_that_starts_it(
    client: TestClient, store: Store
) -> None:
    def problems() -> dict[str, dict[str, str]]:
        return {p["service"]: p for p in client.get("/api/health").json()["problems"]}

    down = problems()  # no robot server at the link's endpoint, no loop ever ran
    assert sorted(down) == ["loop", "robot_server"]
    assert "`pde robot-server`" in down["robot_server"]["action"]
    assert "docker compose up -d learner" in down["loop"]["action"]
    assert "PDE_ROBOT_LINK" not in str(down)
    store.set_service_state("loop", {"phase": "waiting_for_supervisor"})
    down = problems()
    assert "loop" not in down and "waits for its candidate prompts" in down["supervisor"]["what"]
    store.set_service_state("supervisor", {"phase": "running"})
    assert "supervisor" not in problems()
    store.set_service_state("supervisor", {"phase": "stopped"})
    assert "`pde supervisor`" in problems()["supervisor"]["action"]


def test_under_a_restarting_supervisor_the_banner_says_it_restarts_the_service(
    store: Store, tmp_path: Path
) -> None:
    settings = UISettings.model_validate(
        {"data_dir": tmp_path, "database_url": store.url, "restarted_by": "pde demo"}
    )
    link = RobotLink(f"tcp://127.0.0.1:{free_port()}", timeout_s=0.3)
    with TestClient(create_app(settings, TOKEN, store=store, robot_link=link), base_url=LOCAL) as c:
        down = {p["service"]: p for p in c.get("/api/health").json()["problems"]}
    link.close()  # the app closes only a link it made
    assert sorted(down) == ["loop", "robot_server"]
    for p in down.values():
        assert p["action"].startswith("pde demo restarts it by itself") and "`pde" not in p["action"]


def test_the_reset_guide_shows_the_tasks_reset_instructions(
    client: TestClient, store: Store, tmp_path: Path
) -> None:
    _episode(store)
    none = client.get(f"/api/tasks/{TASK}/reset-guide").json()  # no tasks file: no steps, say where
    assert (none["instructions"], none["instructions_file"]) == ("", "")
    tasks = tmp_path / "tasks.toml"
    tasks.write_text(
        f'[tasks.{TASK}]\nreset_instructions = """\nBowl on the left mark.\nContainer right.\n"""\n'
    )
    settings = UISettings.model_validate(
        {"data_dir": tmp_path, "database_url": store.url, "tasks_file": str(tasks)}
    )
    link = RobotLink(f"tcp://127.0.0.1:{free_port()}", timeout_s=0.3)
    with TestClient(create_app(settings, TOKEN, store=store, robot_link=link), base_url=LOCAL) as c:
        guide = c.get(f"/api/tasks/{TASK}/reset-guide").json()
        assert c.get("/api/tasks/no_such_task/reset-guide").status_code == 404
    link.close()
    assert guide["instructions"] == "Bowl on the left mark.\nContainer right."
    assert guide["instructions_file"] == str(tasks)


def test_operator_name_end_now_home_and_practice(client: TestClient, store: Store) -> None:
    eid = _episode(store)
    r = client.post(f"/api/episodes/{eid}/label", json={"success": True, "operator": "ana"}, headers=AUTH)
    assert r.status_code == 200 and r.json()["label"]["operator"] == "ana", r.text
    assert store.labels(eid)[0].operator == "ana"
    r = client.post(
        f"/api/episodes/{eid}/relabel", json={"success": False, "operator": "x" * 101}, headers=AUTH
    )
    assert r.status_code == 422 and len(store.labels(eid)) == 1
    # End now and home need the loop's state: no episode running -> 409; the loop moving -> 409.
    r = client.post("/api/loop/end", json={"success": True}, headers=AUTH)
    assert r.status_code == 409 and "no episode is running" in r.text
    running = _episode(store, finish=False)
    store.set_service_state("loop", {"phase": "running", "episode_id": running, "task": TASK})
    r = client.post("/api/loop/end", json={"success": False}, headers=AUTH)
    assert r.status_code == 200, r.text
    [row] = store.pending_intents(EndEpisode)
    assert row.intent == EndEpisode(episode_id=running, success=False, by="operator page")
    r = client.post("/api/robot/home", headers=AUTH)
    assert r.status_code == 409 and "the loop moves the arm now" in r.text
    assert client.post("/api/robot/home").status_code == 401
    # Practice: the run goes on (not paused); labels, relabels and discards are refused.
    r = client.post("/api/run/pause", json={"paused": True, "practice": True}, headers=AUTH)
    assert r.json() == {"paused": False, "practice": True}
    assert client.get("/api/run").json()["practice"] is True
    for path, body in (
        (f"/api/episodes/{eid}/relabel", {"success": True}),
        (f"/api/episodes/{eid}/discard", {"reason": "bad reset"}),
    ):
        r = client.post(path, json=body, headers=AUTH)
        assert r.status_code == 409 and "practice mode" in r.text, (path, r.text)
    assert len(store.labels(eid)) == 1 and store.episode(eid).status == "labelled"


def test_practice_starts_only_a_practice_episode_and_the_page_shows_it(
    client: TestClient, store: Store
) -> None:
    """Start in practice mode starts the loop's practice episode, never a recorded one the loop was
    still waiting to start; the running practice episode (no row) comes from the loop's state."""
    client.post("/api/run/pause", json={"paused": False, "practice": True}, headers=AUTH)
    store.set_service_state("loop", {"phase": "awaiting_start", "task": TASK, "pid": os.getpid()})
    r = client.post("/api/loop/start", headers=AUTH)
    assert r.status_code == 409 and "practice was switched on" in r.text, r.text
    assert store.pending_intents(StartEpisode) == []
    store.set_service_state("loop", {"phase": "awaiting_start", "task": TASK, "practice": True})
    r = client.post("/api/loop/start", headers=AUTH)
    assert r.status_code == 200, r.text
    started = time.time() - 5.0
    store.set_service_state(
        "loop",
        {"phase": "running", "task": TASK, "practice": True, "episode_id": -1, "started_at_s": started},
    )
    s = client.get("/api/state").json()
    assert s["episode"] is None and s["practice_episode"]["id"] == -1 and s["practice_episode"]["practice"]
    assert s["running"]["episode_id"] == -1 and s["running"]["practice"] and s["running"]["elapsed_s"] >= 5.0
    r = client.post("/api/loop/end", json={"success": True}, headers=AUTH)  # ends it (nothing kept)
    assert r.status_code == 200 and store.pending_intents(EndEpisode)[0].intent.episode_id == -1
    client.post("/api/run/pause", json={"paused": False, "practice": False}, headers=AUTH)
    store.set_service_state("loop", {"phase": "awaiting_start", "task": TASK, "practice": True})
    r = client.post("/api/loop/start", headers=AUTH)
    assert r.status_code == 409 and "practice was ended" in r.text, r.text
