"""E-STOP from the keyboard whatever has the focus: Space on a video or a checkbox, Escape even while
typing in a text field (where Space types a space); S/F with Caps Lock. The page's server is
real; its robot server does not exist, so each e-stop is counted as the request the page sends."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from pde_storage import Store
from tests.helpers import free_port
from tests.operator_ui.browser import ui_server
from tests.operator_ui.conftest import TOKEN
from tests.storage.factories import finish_with_videos, make_episode_file

pytestmark = [pytest.mark.browser]
TASK = "put_green_container_in_bowl"


def test_estop_keys_in_every_focus_and_labels_with_caps_lock(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    store.ensure_task(TASK, "put the green container in the bowl")
    ep = store.create_episode(TASK, store.prompts(TASK)[0].id, 0, "bootstrap")
    finish_with_videos(store, ep.id, make_episode_file(ep.id, TASK, n_chunks=3))
    estops: list[str] = []
    page.on("request", lambda r: estops.append(r.url) if r.url.endswith("/api/robot/estop") else None)
    with ui_server(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}") as (base, _):
        page.goto(f"{base}/#token={TOKEN}")
        video = page.locator("#awaiting-video video")
        expect(video).to_be_visible(timeout=15_000)
        video.focus()
        page.keyboard.press("Space")  # on a video: E-STOP, not play
        page.wait_for_function("() => document.querySelector('#awaiting-video video').paused")
        page.locator("#cue-sound").focus()
        page.keyboard.press("Space")  # on a checkbox: E-STOP, not a tick
        expect(page.locator("#cue-sound")).not_to_be_checked()
        reason = page.locator("#label-reason")
        reason.focus()
        page.keyboard.type("bad grip")  # Space in a text field types a space ...
        expect(reason).to_have_value("bad grip")
        page.keyboard.press("Escape")  # ... and Escape stops there
        deadline = time.monotonic() + 10
        while len(estops) < 3 and time.monotonic() < deadline:
            page.wait_for_timeout(100)  # (lets the page's request events arrive)
        assert len(estops) == 3, estops
        reason.fill("")
        page.locator("#awaiting-id").click()  # focus back on the page
        page.keyboard.press("CapsLock")
        page.keyboard.press("F")  # F with Caps Lock (no Shift): labels failure
        expect(page.locator("#pending")).to_contain_text(f"#{ep.id} failure", timeout=5_000)
        page.goto("about:blank")
    store.close()
