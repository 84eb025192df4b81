"""The page in headless Chromium when things go wrong: its server dies, keys arrive while the operator
looks at another episode. `pde ui` runs as a real process on a real SQLite store; no loop runs, so the
episodes awaiting a label are made in the store directly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from pde_storage import Store
from tests.helpers import free_port
from tests.operator_ui.browser import SHOTS, box_of, ended_episodes, inside_viewport, kill, overlap, ui_server
from tests.operator_ui.conftest import TOKEN

pytestmark = [pytest.mark.browser]


def test_connection_lost_banner_greys_pills_and_disables_actions(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    with Store.open(url, tmp_path / "media") as store:
        [eid] = ended_episodes(store, 1)
    with ui_server(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}") as (base, proc):
        page.goto(f"{base}/#token={TOKEN}")
        expect(page.locator("#awaiting")).to_have_attribute("data-episode-id", str(eid), timeout=15_000)
        expect(page.locator("#label-success")).to_be_enabled()
        expect(page.locator('.pill[data-service="database"]')).to_have_class("pill ok", timeout=10_000)
        expect(page.locator("#conn-banner")).to_be_hidden()
        killed_at = time.monotonic()
        kill(proc)
        # The page promises 3 s (2 s without an answer, checked every 0.25 s); the test only waits
        # generously for it, since a loaded CI machine may delay the browser's timers.
        expect(page.locator("#conn-banner")).to_be_visible(timeout=20_000)
        print(f"connection-lost banner {time.monotonic() - killed_at:.2f} s after the kill")
        for pill in page.locator(".pill").all():
            expect(pill).to_have_class("pill unknown")
        for button in ("#label-success", "#label-failure", "#start", "#release", "#pause"):
            expect(page.locator(button)).to_be_disabled()
        page.keyboard.press("s")  # does nothing, and says nothing misleading
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "operator_disconnected.png"), full_page=True)
        page.goto("about:blank")
    with Store.open(url, tmp_path / "media") as store:
        assert store.episode(eid).status == "awaiting_label"


def test_keys_label_only_the_episode_shown_as_awaiting(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    first, second = ended_episodes(store, 2)
    store.add_label(first, False, source="operator")
    estops: list[str] = []
    page.on("request", lambda r: estops.append(r.url) if r.url.endswith("/api/robot/estop") else None)
    with ui_server(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}") as (base, _):
        page.goto(f"{base}/#token={TOKEN}")
        awaiting = page.locator("#awaiting")
        expect(awaiting).to_have_attribute("data-episode-id", str(second), timeout=15_000)
        expect(page.locator("#awaiting-id")).to_have_text(f"#{second}")
        expect(page.locator("#label-success")).to_contain_text(f"#{second}")
        # The awaiting episode's own video, opened on its last frame.
        page.wait_for_function(
            "() => { const v = document.querySelector('#awaiting-video video');"
            " return v && v.readyState >= 2 && v.currentTime > 0 && v.currentTime >= v.duration - 0.2; }",
            timeout=15_000,
        )
        # The operator opens the first (labelled) episode and watches its video.
        page.locator(f'#history tr[data-episode-id="{first}"]').click()
        video = page.locator('#detail-videos video[data-camera="external"]')
        expect(video).to_be_visible()
        video.focus()
        for key in ("s", "f", "Control+f", "Control+s", "Shift+S", "Alt+f"):  # (Space: E-STOP)
            page.keyboard.press(key)
        page.locator("#detail-id").click()  # focus back on the page, away from the video
        for key in ("Control+f", "Meta+s", "Shift+F"):
            page.keyboard.press(key)
        expect(page.locator("#pending")).to_be_hidden()  # nothing is even held for sending
        assert store.episode(second).status == "awaiting_label"
        assert store.episode(first).success is False and len(store.labels(first)) == 1
        assert estops == []
        page.keyboard.press("s")  # plain S: labels the episode the box shows, only that one
        expect(awaiting).to_be_hidden(timeout=10_000)
        assert (store.episode(second).status, store.episode(second).success) == ("labelled", True)
        assert store.episode(first).success is False and len(store.labels(first)) == 1
        page.keyboard.press("f")  # nothing awaits a label: nothing happens
        page.goto("about:blank")
    assert [lab.success for lab in store.labels(second)] == [True]
    store.close()


def test_token_is_checked_on_load_and_a_wrong_link_keeps_a_good_token(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    with ui_server(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}") as (base, _):
        banner = page.locator("#token-banner")
        page.goto(f"{base}/")
        expect(banner).to_be_visible(timeout=15_000)
        expect(banner).to_contain_text("No token")
        expect(banner).to_contain_text("#token=")
        # (a query string makes each goto a new load: a changed #hash alone does not reload)
        page.goto(f"{base}/?load=2#token=an-old-token-from-yesterday")
        expect(banner).to_contain_text("wrong", timeout=15_000)
        page.fill("#token", TOKEN)
        page.dispatch_event("#token", "change")
        expect(banner).to_be_hidden(timeout=10_000)
        # A stale link must not overwrite the good token saved in this browser.
        page.goto(f"{base}/?load=3#token=an-old-token-from-yesterday")
        expect(page.locator("#toast")).to_contain_text("kept the token saved", timeout=15_000)
        expect(page.locator("#token")).to_have_value(TOKEN)
        expect(banner).to_be_hidden()
        page.goto("about:blank")


def test_phone_width_keeps_estop_and_labels_on_screen(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    w, h = 390, 844
    with Store.open(url, tmp_path / "media") as store:
        ended_episodes(store, 3)
    page.set_viewport_size({"width": w, "height": h})
    with ui_server(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}") as (base, _):
        page.goto(f"{base}/#token={TOKEN}")
        expect(page.locator("#label-success")).to_be_enabled(timeout=15_000)
        expect(page.locator("#history tbody tr")).to_have_count(3, timeout=10_000)
        assert page.evaluate("document.documentElement.scrollWidth") <= w
        for scroll in ("window.scrollTo(0, 0)", "window.scrollTo(0, document.body.scrollHeight)"):
            page.evaluate(scroll)
            estop = box_of(page, "#estop")
            assert inside_viewport(estop, w, h), estop
            for button in ("#label-success", "#label-failure"):
                assert inside_viewport(box_of(page, button), w, h), button
                assert not overlap(box_of(page, button), estop), button
        page.evaluate("window.scrollTo(0, 0)")
        for covered in ("#token", "#release"):
            assert not overlap(box_of(page, covered), box_of(page, "#estop")), covered
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "operator_phone_awaiting_label.png"))
        page.goto("about:blank")
