"""The operator page in headless Chromium, against `pde ui` as a process and the episode loop
(with Fake robot/actor doubles) sharing one SQLite database."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from learner.loop.core import EpisodeLoop
from learner.loop.settings import LoopSettings
from pde_storage import Store
from tests.helpers import free_port
from tests.learner.loop.doubles import FakeActor, FakeRobot
from tests.operator_ui.browser import SHOTS, ui_server
from tests.operator_ui.conftest import TOKEN

pytestmark = [pytest.mark.browser]


def test_start_label_history_video_relabel(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    settings = LoopSettings.model_validate(
        dict(
            tasks=["put_green_container_in_bowl"],
            auto_start=False,
            auto_label=False,
            max_episodes=2,
            max_chunks=6,
            poll_period_s=0.01,
            rollouts_per_prompt=10,
            error_backoff_s=0.2,
        )
    )
    actor = FakeActor(chunk_time_s=0.05, n_chunks=6)
    robot = FakeRobot()
    robot.fail_resets = 10**6  # e-stop latched until the test "releases" it
    loop = EpisodeLoop(store, robot, actor, settings)
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    # The lab's reset steps for a paper task, from the tasks file the page reads (PDE_TASKS_FILE).
    tasks = tmp_path / "tasks.toml"
    tasks.write_text('[tasks.put_green_container_in_bowl]\nreset_instructions = "Bowl at the back left."\n')
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    with ui_server(url, tmp_path, TOKEN, endpoint, PDE_TASKS_FILE=str(tasks)) as (base, _):
        page.goto(f"{base}/#token={TOKEN}")
        expect(page.locator("#estop")).to_be_visible()
        expect(page.locator("#last-error")).to_contain_text("reset failed", timeout=15_000)
        robot.fail_resets = 0  # released: the next reset works and the error goes away
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=15_000)
        expect(page.locator("#last-error")).to_have_text("")
        expect(page.locator("#task")).to_have_text("put_green_container_in_bowl")
        expect(page.locator("#start")).to_be_enabled()
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "operator_awaiting_start.png"), full_page=True)
        page.keyboard.press("Enter")  # the start shortcut
        expect(page.locator("#phase")).to_have_text("awaiting_label", timeout=15_000)
        [ep] = store.episodes()
        store.add_label(
            ep.id, True, source="vlm", reason="the container rests inside the bowl"
        )  # the supervisor
        expect(page.locator("#vlm")).to_contain_text("success", timeout=5_000)
        expect(page.locator("#label-success")).to_be_enabled()
        page.screenshot(path=str(SHOTS / "operator_awaiting_label.png"), full_page=True)
        page.keyboard.press("f")  # failure shortcut
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=15_000)
        # The reset guide: the lab's steps and the start scene of the episode just run.
        expect(page.locator("#reset-steps")).to_have_text("Bowl at the back left.", timeout=10_000)
        expect(page.locator("#reset-ref figcaption")).to_have_text(
            f"start scene of episode #{ep.id}", timeout=10_000
        )
        e = store.episode(ep.id)
        assert (e.status, e.success) == ("labelled", False)
        assert [lab.source for lab in store.labels(ep.id)] == ["vlm", "operator"]

        row = page.locator(f'#history tr[data-episode-id="{ep.id}"]')
        expect(row).to_contain_text("failure", timeout=5_000)
        row.click()
        video = page.locator('#detail-videos video[data-camera="external"]')
        expect(video).to_be_visible()
        page.wait_for_function(
            "() => { const v = document.querySelector('#detail-videos video[data-camera=\"external\"]');"
            " return v && v.readyState >= 2 && v.duration > 0 && v.videoWidth > 0; }",
            timeout=15_000,
        )
        page.locator("#relabel-success").click()
        expect(page.locator("#pending")).to_contain_text(f"Relabelling #{ep.id} success")
        page.locator("#send-label").click()
        expect(page.locator("#detail-labels tbody tr")).to_have_count(3, timeout=5_000)
        assert store.episode(ep.id).success is True
        # The curves and the pool table follow the labels.
        expect(page.locator('svg.plot[data-title="canonical-prompt success"]')).to_have_attribute(
            "data-points", "1", timeout=10_000
        )
        expect(page.locator("#pools")).to_contain_text("1/1", timeout=10_000)
        page.screenshot(path=str(SHOTS / "operator_history_detail.png"), full_page=True)

        # Without the token the page shows the refusal, keeps the relabel, and nothing changes.
        page.fill("#token", "")
        page.dispatch_event("#token", "change")
        page.locator("#relabel-failure").click()
        page.locator("#send-label").click()
        expect(page.locator("#outbox-banner")).to_contain_text("the token is refused (401)", timeout=5_000)
        assert store.episode(ep.id).success is True and len(store.labels(ep.id)) == 3
        page.goto("about:blank")  # drop the video connections before the server goes
    loop.stop()
    t.join(5)
    store.close()
