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


# Every control that can hold the focus and has an id (the page's fixed controls; rows drawn from
# data come and go with each refresh), visible now.
FOCUSABLE_JS = """() => [...document.querySelectorAll(
    "[id]:is(a[href], button, input, select, textarea, video, [tabindex]):not([disabled])")]
  .filter((e) => e.getClientRects().length && getComputedStyle(e).visibility !== "hidden")
  .map((e) => e.id)"""


def _estop_counted(page: Page, estops: list[str], want: int, what: str) -> None:
    deadline = time.monotonic() + 5  # this press's own deadline
    while len(estops) < want and time.monotonic() < deadline:
        page.wait_for_timeout(50)  # (lets the page's request events arrive)
    assert len(estops) == want, f"{what}: {len(estops)} e-stop requests, expected {want}"


def test_estop_keys_from_every_control_and_from_every_open_dropdown(page: Page, tmp_path: Path) -> None:
    """Escape from each focusable control; Escape and Space with each dropdown's list open. (Native
    <select> popups took every key in Chromium: the first Escape only closed the popup, Space never
    stopped the arm.)"""
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    store.ensure_task(TASK, "put the green container in the bowl")
    ep = store.create_episode(TASK, store.prompts(TASK)[0].id, 0, "bootstrap")
    finish_with_videos(store, ep.id, make_episode_file(ep.id, TASK, n_chunks=3))
    store.close()
    estops: list[str] = []
    page.on("request", lambda r: estops.append(r.url) if r.url.endswith("/api/robot/estop") else None)
    robot = f"tcp://127.0.0.1:{free_port()}"
    with ui_server(url, tmp_path, TOKEN, robot, PDE_UI_ROBOT_TIMEOUT_S="0.2") as (base, _):
        page.goto(f"{base}/#token={TOKEN}")
        expect(page.locator("#awaiting-video video")).to_be_visible(timeout=15_000)
        selects = page.eval_on_selector_all("select", "(ss) => ss.map((s) => s.id)")
        assert len(selects) >= 6, selects  # the history filters and the record panel's task
        for sel in selects:
            button = page.locator(f"#{sel}-button")
            opener = button if button.count() else page.locator(f"#{sel}")  # (main: the native one)
            for key in ("Escape", "Space"):
                opener.scroll_into_view_if_needed()
                opener.click()
                if button.count():
                    expect(page.locator(f"#{sel}-list")).to_be_visible()
                before = len(estops)
                page.keyboard.press(key)
                _estop_counted(page, estops, before + 1, f"{key} with the {sel} dropdown open")
                if button.count():
                    expect(page.locator(f"#{sel}-list")).to_be_hidden()
        controls = page.evaluate(FOCUSABLE_JS)
        assert len(controls) >= 15, controls  # the enumeration found the page's controls
        print(f"E-STOP: {len(selects)} dropdowns open x (Escape, Space), Escape on {len(controls)} controls")
        for control in controls:
            target = page.locator(f"#{control}")
            if not target.count() or not target.is_visible():
                continue  # hidden since (e.g. a button a refresh disabled)
            target.focus()
            before = len(estops)
            page.keyboard.press("Escape")
            _estop_counted(page, estops, before + 1, f"Escape with the focus on #{control}")
        page.goto("about:blank")
