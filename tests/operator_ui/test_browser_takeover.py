"""Take over and finish (issue 26 item 5), in headless Chromium against `pde ui` as a process and
the episode loop in this process: "end episode now — success" stops the running episode and keeps
it, labelled by the operator (through the loop's actor wrapper, learner/loop/takeover.py); practice
mode runs an episode (Start, end now) that is stored nowhere, and the page's server refuses
labels; "take control" (shown only with a person source) hands the episode to the person; on a phone, Start,
home arm and the e-stop's release are in reach (item 8)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from playwright.sync_api import Page, expect

from learner.loop.core import ActorLike, EpisodeLoop
from learner.loop.settings import LoopSettings
from learner.loop.takeover import TakeoverActor
from pde_contract.client import RobotClient
from pde_contract.intents import TakeControl
from pde_storage import Store
from teleop.base import TeleopSource
from teleop.scripted import ScriptedSource
from tests.helpers import free_port
from tests.learner.loop.doubles import FakeActor, FakeRobot, PersonActorFake
from tests.operator_ui.browser import (
    SHOTS,
    TASK,
    box_of,
    inside_viewport,
    overlap,
    sim_robot_server,
    ui_server,
)
from tests.operator_ui.conftest import TOKEN

pytestmark = [pytest.mark.browser]
LONG_EPISODE_CHUNKS = 1000  # 0.1 s each: the episode runs until the page ends it


@contextmanager
def loop_and_page(
    tmp_path: Path, actor: ActorLike, person: TeleopSource | None = None
) -> Iterator[tuple[Store, str]]:
    """The episode loop (waiting for Start, episodes of up to LONG_EPISODE_CHUNKS) with ``actor``
    behind the takeover wrapper, in a thread, and `pde ui` as a process: (store, page's base URL)."""
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    settings = LoopSettings.model_validate(
        {
            "tasks": [TASK],
            "auto_start": False,
            "auto_label": False,
            "max_chunks": LONG_EPISODE_CHUNKS,
            "poll_period_s": 0.01,
            "rollouts_per_prompt": 10,
        }
    )
    loop = EpisodeLoop(store, FakeRobot(), TakeoverActor(actor, store, person), settings)
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    try:
        with ui_server(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}") as (base, _):
            yield store, base
    finally:
        loop.stop()
        t.join(10)
        store.close()


def test_end_now_keeps_the_episode_with_the_operators_label_and_practice_records_nothing(
    page: Page, tmp_path: Path
) -> None:
    actor = FakeActor(chunk_time_s=0.1, n_chunks=LONG_EPISODE_CHUNKS)
    with loop_and_page(tmp_path, actor) as (store, base):
        page.goto(f"{base}/#token={TOKEN}")
        page.fill("#operator", "ana")
        page.dispatch_event("#operator", "change")
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=15_000)
        expect(page.locator("#takeover")).to_be_hidden()
        page.locator("#start").click()
        expect(page.locator("#phase")).to_have_text("running", timeout=15_000)
        info = page.locator("#running-info")
        expect(info).to_contain_text("episode #1", timeout=10_000)
        expect(info).to_contain_text("0:0")  # elapsed m:ss
        expect(page.locator("#take-control")).to_be_hidden()  # no person source in this run
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "operator_running_takeover.png"), full_page=True)
        page.locator("#end-success").click()
        # The episode ends, is stored with what ran, and the page sends the operator's verdict.
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=30_000)
        expect(page.locator("#outbox-banner")).to_be_hidden()
        ep = store.episode(1)
        assert (ep.status, ep.success) == ("labelled", True)
        assert 1 <= ep.n_chunks < LONG_EPISODE_CHUNKS and ep.video_paths
        [lab] = store.labels(1)
        assert (lab.operator, lab.source, lab.reason) == ("ana", "operator", "ended early on the page")

        # Practice: Start runs a practice episode that can be ended like any other; nothing of it
        # is stored, no label goes, and the page refuses labels meanwhile.
        page.locator("#practice").click()
        expect(page.locator("#practice-banner")).to_be_visible(timeout=10_000)
        expect(page.locator("#start")).to_be_enabled(timeout=15_000)  # once the loop waits for practice
        page.locator("#start").click()
        expect(page.locator("#toast")).to_contain_text("PRACTICE episode started", timeout=15_000)
        expect(page.locator("#running-info")).to_contain_text("PRACTICE episode", timeout=10_000)
        expect(page.locator("#episode-id")).to_have_text("practice")
        page.locator("#end-failure").click()
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=30_000)
        expect(page.locator("#outbox-banner")).to_be_hidden()
        r = page.request.post(
            f"{base}/api/episodes/1/relabel",
            headers={"Authorization": f"Bearer {TOKEN}"},
            data={"success": False},
        )
        assert r.status == 409 and "practice" in r.text(), r.text()
        assert len(store.episodes()) == 1 and len(store.labels(1)) == 1
        page.locator("#practice-end").click()
        expect(page.locator("#practice-banner")).to_be_hidden(timeout=10_000)
        expect(page.locator("#start")).to_be_enabled(timeout=10_000)
        page.goto("about:blank")


def test_take_control_hands_the_running_episode_to_the_person(page: Page, tmp_path: Path) -> None:
    row = np.array([0.01, 0, 0, 0, 0, 0, 0.08])
    actor = PersonActorFake(n_chunks=LONG_EPISODE_CHUNKS, chunk_time_s=0.1)
    with ScriptedSource([row, row, row]) as person, loop_and_page(tmp_path, actor, person) as (store, base):
        page.goto(f"{base}/#token={TOKEN}")
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=15_000)
        page.locator("#start").click()
        expect(page.locator("#phase")).to_have_text("running", timeout=15_000)
        # the Start's own toast ("episode #1 started") comes last of its messages: let it land
        # before the take-control toast, which it would otherwise overwrite (seen in a CI run)
        expect(page.locator("#toast")).to_contain_text("started", timeout=15_000)
        take = page.locator("#take-control")
        expect(take).to_be_visible(timeout=10_000)
        expect(take).to_be_enabled()
        take.click()
        expect(page.locator("#toast")).to_contain_text("take control with the scripted", timeout=10_000)
        # the loop's actor takes the intent at its next stop check (seconds on a loaded CI machine)
        deadline = time.monotonic() + 60
        while not actor.takes and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        assert len(actor.takes) == 1 and len(actor.takes[0]) == 3
        page.locator("#end-failure").click()
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=30_000)
        assert store.pending_intents(TakeControl) == []
        page.goto("about:blank")


def test_phone_start_home_and_release_in_reach(page: Page, tmp_path: Path) -> None:
    """Phone, 390x844 (issue 26 item 8): no sideways scroll (the reset guide names a long tasks-file
    path), Start reachable without scrolling, home arm works, and when the E-STOP is latched its
    release is in reach and not under the fixed E-STOP. The loop drives the sim robot server."""
    w, h = 390, 844
    url = f"sqlite:///{tmp_path}/pde.db"
    tasks = tmp_path / ("a-folder-with-a-rather-long-name-" * 3) / "tasks.toml"
    tasks.parent.mkdir()
    tasks.write_text(f"[tasks.{TASK}]\n")  # no reset_instructions: the page names the file's path
    store = Store.open(url, tmp_path / "media")
    settings = LoopSettings.model_validate(
        {"tasks": [TASK], "auto_start": False, "auto_label": False, "max_chunks": 2, "poll_period_s": 0.01}
    )
    page.set_viewport_size({"width": w, "height": h})
    with sim_robot_server(tmp_path) as endpoint, RobotClient(endpoint, name="loop", timeout_s=5.0) as robot:
        robot.connect()
        loop = EpisodeLoop(store, robot, FakeActor(chunk_time_s=0.05, n_chunks=2), settings)
        t = threading.Thread(target=loop.run, daemon=True)
        t.start()
        try:
            with ui_server(url, tmp_path, TOKEN, endpoint, PDE_TASKS_FILE=str(tasks)) as (base, _):
                page.goto(f"{base}/#token={TOKEN}")
                start = page.locator("#start")
                expect(start).to_be_enabled(timeout=30_000)
                expect(page.locator("#reset-steps")).to_contain_text("a-folder-with-a-rather-long-name")
                assert page.evaluate("document.documentElement.scrollWidth") <= w
                for scroll in ("window.scrollTo(0, 0)", "window.scrollTo(0, document.body.scrollHeight)"):
                    page.evaluate(scroll)
                    assert inside_viewport(box_of(page, "#start"), w, h)
                    assert not overlap(box_of(page, "#start"), box_of(page, "#estop"))
                page.evaluate("window.scrollTo(0, 0)")
                SHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SHOTS / "operator_phone_awaiting_start.png"))

                page.locator("#home").click()
                expect(page.locator("#home")).to_contain_text("STAND CLEAR")
                page.locator("#home").click()
                expect(page.locator("#toast")).to_have_text("arm homed", timeout=30_000)

                page.locator("#estop").click()
                release = page.locator("#release-banner")
                expect(release).to_be_visible(timeout=10_000)
                expect(start).to_be_disabled()
                assert page.evaluate("document.documentElement.scrollWidth") <= w
                for scroll in ("window.scrollTo(0, 0)", "window.scrollTo(0, document.body.scrollHeight)"):
                    page.evaluate(scroll)
                    assert inside_viewport(box_of(page, "#release-banner"), w, h)
                    assert not overlap(box_of(page, "#release-banner"), box_of(page, "#estop"))
                page.evaluate("window.scrollTo(0, 0)")
                page.screenshot(path=str(SHOTS / "operator_phone_estop_latched.png"))
                release.click()
                expect(release).to_contain_text("STAND CLEAR")
                release.click()
                expect(page.locator("#estop-banner")).to_be_hidden(timeout=10_000)
                page.goto("about:blank")
        finally:
            loop.stop()
            t.join(10)
    store.close()
