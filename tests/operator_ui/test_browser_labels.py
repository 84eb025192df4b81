"""Labels are never lost silently (issue 26 item 4), in headless Chromium against `pde ui` as a
real process on a real SQLite store: a held label outlives the page's server killed inside the
undo window (kept in the browser, sent when the server is back); relabel and discard are held for
undo and warn when PPO already trained on the label; labels carry the operator's name."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from pde_storage import Store
from tests.helpers import free_port
from tests.operator_ui.browser import ended_episodes, kill, ui_server
from tests.operator_ui.conftest import TOKEN

pytestmark = [pytest.mark.browser]


def _set_name(page: Page, name: str) -> None:
    page.fill("#operator", name)
    page.dispatch_event("#operator", "change")
    page.locator("#awaiting h3, #now h2").first.click()  # the focus out of the field: keys are shortcuts


def test_a_label_held_when_the_page_server_dies_is_sent_when_it_is_back(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    with Store.open(url, tmp_path / "media") as store:
        [eid] = ended_episodes(store, 1)
    robot, port = f"tcp://127.0.0.1:{free_port()}", free_port()
    # A 6 s undo window: the kill comes well inside it (checked below: nothing was sent before).
    with ui_server(url, tmp_path, TOKEN, robot, PDE_UI_PORT=str(port), PDE_UI_LABEL_UNDO_S="6") as (
        base,
        proc,
    ):
        page.goto(f"{base}/#token={TOKEN}")
        expect(page.locator("#awaiting")).to_have_attribute("data-episode-id", str(eid), timeout=15_000)
        _set_name(page, "ana")
        page.keyboard.press("f")
        expect(page.locator("#pending")).to_contain_text(f"Labelling #{eid} failure")
        kill(proc)
        with Store.open(url, tmp_path / "media") as store:
            assert store.labels(eid) == [], "the label left before the kill: the test proves nothing"
        banner = page.locator("#outbox-banner")
        expect(banner).to_contain_text(f"label #{eid} failure by ana", timeout=30_000)
        expect(banner).to_contain_text("NOT SENT yet")
        expect(banner).to_contain_text("kept in this browser")
        # The page goes away while its server is down (its last-moment send fails too) ...
        page.goto("about:blank")
    with Store.open(url, tmp_path / "media") as store:
        assert store.labels(eid) == []
    # ... and the next visit, once the server is back, sends what this browser kept.
    with ui_server(url, tmp_path, TOKEN, robot, PDE_UI_PORT=str(port)) as (base, _):
        page.goto(base)
        expect(page.locator("#toast")).to_contain_text(f"label #{eid} failure by ana: sent", timeout=20_000)
        expect(page.locator("#outbox-banner")).to_be_hidden()
        assert page.evaluate("localStorage.getItem('pde-outbox')") == "[]"
        page.goto("about:blank")
    with Store.open(url, tmp_path / "media") as store:
        [lab] = store.labels(eid)
        assert (lab.success, lab.source, lab.operator) == (False, "operator", "ana")
        assert store.episode(eid).status == "labelled"


def test_relabel_and_discard_are_held_for_undo_and_warn_when_ppo_used_the_label(
    page: Page, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    used, fresh, waiting = ended_episodes(store, 3, stage="rl")
    store.add_label(used, True, operator="bo")
    store.add_checkpoint(1, tmp_path / "v1.ckpt", {"trained_through_episode_id": float(used)})
    store.add_label(fresh, True, operator="bo")  # labelled after the update: no PPO used it yet
    with ui_server(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}", PDE_UI_LABEL_UNDO_S="600") as (
        base,
        _,
    ):
        page.goto(f"{base}/#token={TOKEN}")
        expect(page.locator("#awaiting")).to_have_attribute("data-episode-id", str(waiting), timeout=15_000)
        _set_name(page, "cy")
        page.locator(f'#history tr[data-episode-id="{used}"]').click()
        ppo = page.locator("#detail-ppo")
        expect(ppo).to_contain_text(
            "PPO already trained on this label (the update to policy v1", timeout=10_000
        )
        expect(page.locator("#detail-labels tbody")).to_contain_text("bo")

        # A relabel is held: Undo sends nothing; the held text repeats the PPO warning.
        page.locator("#relabel-failure").click()
        expect(page.locator("#pending")).to_contain_text(f"Relabelling #{used} failure")
        expect(page.locator("#pending")).to_contain_text("PPO already trained")
        page.locator("#undo-label").click()
        expect(page.locator("#toast")).to_contain_text("nothing was sent")
        assert len(store.labels(used)) == 1
        page.locator("#relabel-failure").click()
        page.locator("#send-label").click()
        expect(page.locator("#detail-labels tbody tr")).to_have_count(2, timeout=10_000)
        lab = store.labels(used)[-1]
        assert (lab.success, lab.operator) == (False, "cy")
        expect(page.locator("#detail-labels tbody")).to_contain_text("cy")

        # A discard is held too.
        page.fill("#discard-reason", "person in the scene")
        page.locator("#discard").click()
        expect(page.locator("#pending")).to_contain_text(f"Discarding #{used} (person in the scene)")
        page.keyboard.press("u")
        expect(page.locator("#pending")).to_be_hidden()
        assert store.episode(used).status == "labelled"

        # An episode labelled after the last update: no warning.
        page.locator(f'#history tr[data-episode-id="{fresh}"]').click()
        expect(page.locator("#detail-id")).to_have_text(f"#{fresh}", timeout=10_000)
        expect(ppo).to_be_hidden()

        # A second tab shares the outbox but never sends a label held in the first one's undo window.
        page.keyboard.press("s")
        expect(page.locator("#pending")).to_contain_text(f"Labelling #{waiting} success")
        with page.expect_popup() as opened:  # a second tab of the same browser (its localStorage)
            page.evaluate(f"window.open('{base}/')")
        other = opened.value
        expect(other.locator("#awaiting")).to_have_attribute("data-episode-id", str(waiting), timeout=15_000)
        other.evaluate("flushOutbox()")
        assert store.labels(waiting) == []
        other.close()

        # Labelled elsewhere meanwhile (another tab): the refusal names the label until dropped.
        store.add_label(waiting, False, operator="dee")
        page.locator("#send-label").click()
        banner = page.locator("#outbox-banner")
        expect(banner).to_contain_text(f"label #{waiting} success by cy", timeout=10_000)
        expect(banner).to_contain_text("NOT SENT — refused: 409")
        banner.locator("button.drop").click()
        expect(banner).to_be_hidden()
        assert [lab.operator for lab in store.labels(waiting)] == ["dee"]
        page.goto("about:blank")
    store.close()
