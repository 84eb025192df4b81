"""What an operator running 128+ rollouts a day uses, in headless Chromium against `pde ui` as a
process and a real SQLite store: undo of a label before it is sent, a failure reason with the
label, discard and restore, notes, history paging and filters."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from pde_storage import Store
from tests.helpers import free_port
from tests.operator_ui.browser import SHOTS, choose, ui_server
from tests.operator_ui.conftest import TOKEN
from tests.storage.factories import finish_with_videos, make_episode_file

pytestmark = [pytest.mark.browser]
TASK = "put_green_container_in_bowl"
N_ABORTED = 52  # more than one page of 50


def test_undo_reason_discard_restore_note_paging_filters(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    store.ensure_task(TASK, "put the green container in the bowl")
    pid = store.prompts(TASK)[0].id
    for _ in range(N_ABORTED):  # cheap rows: no episode file, no video
        store.abort_episode(store.create_episode(TASK, pid, 0, "bootstrap").id, "operator aborted")
    ended = []
    for _ in range(3):
        ep = store.create_episode(TASK, pid, 0, "bootstrap")
        finish_with_videos(store, ep.id, make_episode_file(ep.id, TASK, n_chunks=3))
        ended.append(ep.id)
    first, second, third = ended
    # A long undo window, so a slow machine cannot send the label before the test presses U.
    with ui_server(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}", PDE_UI_LABEL_UNDO_S="600") as (
        base,
        _,
    ):
        page.goto(f"{base}/#token={TOKEN}")
        awaiting = page.locator("#awaiting")
        expect(awaiting).to_have_attribute("data-episode-id", str(first), timeout=15_000)

        # Undo: the label is held back for a few seconds and never sent when undone.
        page.keyboard.press("f")
        expect(page.locator("#pending")).to_contain_text(f"Labelling #{first} failure")
        page.keyboard.press("u")
        expect(page.locator("#pending")).to_be_hidden()
        expect(page.locator("#toast")).to_contain_text("nothing was sent")
        # A reason typed in the field goes with the label (keys typed there are text, not shortcuts).
        page.fill("#label-reason", "dropped the object")
        page.locator("#awaiting h3").click()
        page.keyboard.press("f")
        expect(page.locator("#pending")).to_contain_text("(dropped the object)")
        assert store.labels(first) == []  # held back
        page.locator("#send-label").click()
        expect(awaiting).to_have_attribute("data-episode-id", str(second), timeout=15_000)
        [lab] = store.labels(first)
        assert (lab.success, lab.reason, lab.source) == (False, "dropped the object", "operator")

        # Discard the awaiting episode (bad reset): kept, out of training, the next one is asked.
        page.locator("#discard-awaiting").click()
        expect(page.locator("#pending")).to_contain_text(f"Discarding #{second} (bad reset)")
        page.locator("#send-label").click()
        expect(awaiting).to_have_attribute("data-episode-id", str(third), timeout=15_000)
        assert (store.episode(second).status, store.episode(second).discard_reason) == (
            "discarded",
            "bad reset",
        )

        # History: 55 episodes in pages of 50, newest first; the discarded one is marked.
        rows = page.locator("#history tbody tr[data-episode-id]")
        expect(rows).to_have_count(50, timeout=10_000)
        expect(rows.first).to_have_attribute("data-episode-id", str(third))
        expect(page.locator(f'#history tr[data-episode-id="{second}"]')).to_have_class("discarded")
        page.locator("#page-older").click()
        expect(rows).to_have_count(5, timeout=10_000)
        expect(rows.last).to_have_attribute("data-episode-id", "1")
        expect(page.locator("#page-older")).to_be_disabled()
        page.locator("#page-newest").click()
        expect(rows).to_have_count(50, timeout=10_000)
        choose(page, "#f-status", "discarded")
        expect(rows).to_have_count(1, timeout=10_000)
        choose(page, "#f-status", "")
        choose(page, "#f-label", "failure")
        expect(rows).to_have_count(1, timeout=10_000)
        expect(rows.first).to_have_attribute("data-episode-id", str(first))
        choose(page, "#f-label", "")
        choose(page, "#f-task", TASK)
        expect(page.locator("#f-prompt option")).to_have_count(2, timeout=10_000)
        choose(page, "#f-stage", "rl")
        expect(page.locator("#history tbody")).to_contain_text("no episodes match", timeout=10_000)
        choose(page, "#f-stage", "")

        # Restore the discarded episode and leave a note on it.
        choose(page, "#f-status", "discarded")
        expect(rows).to_have_count(1, timeout=10_000)
        rows.first.click()
        expect(page.locator("#detail-discarded")).to_contain_text("bad reset", timeout=10_000)
        page.locator("#restore").click()
        expect(page.locator("#detail-discarded")).to_be_hidden(timeout=10_000)
        assert store.episode(second).status == "awaiting_label"
        page.fill("#note", "operator's sleeve in the wrist view at the start")
        page.locator("#save-note").click()
        expect(page.locator("#toast")).to_contain_text("saved", timeout=10_000)
        assert store.episode(second).note == "operator's sleeve in the wrist view at the start"
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "operator_history_filters_detail.png"), full_page=True)
        page.goto("about:blank")
    store.close()


def test_relabel_moves_the_curves_and_flags_a_rejected_prompt(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    store.ensure_task(TASK, "put the green container in the bowl")
    canon = store.prompts(TASK)[0].id
    cand = store.add_prompt(TASK, "drop the green box in the bowl").id

    def labelled(prompt_id: int, success: bool) -> int:
        ep = store.create_episode(TASK, prompt_id, 0, "bootstrap")
        finish_with_videos(store, ep.id, make_episode_file(ep.id, TASK, n_chunks=2))
        store.add_label(ep.id, success, source="operator")
        return ep.id

    c1, c2, r1 = labelled(canon, False), labelled(canon, False), labelled(cand, False)
    store.set_prompt_status(cand, "rejected")
    store.set_service_state("supervisor", {"phase": "running", "eta": 0.1})  # its published threshold
    with ui_server(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}") as (base, _):
        page.goto(f"{base}/#token={TOKEN}")
        curve = page.locator('svg.plot[data-title="canonical-prompt success"]')
        expect(curve).to_have_attribute("data-points", "2", timeout=15_000)
        expect(curve).to_contain_text("last 0.00")
        page.locator(f'#history tr[data-episode-id="{c2}"]').click()
        page.fill("#relabel-reason", "it was in the bowl after all")
        page.locator("#relabel-success").click()
        expect(curve).to_contain_text("last 0.50", timeout=15_000)  # moved by the relabel
        assert store.labels(c2)[-1].reason == "it was in the bowl after all"
        page.locator(f'#history tr[data-episode-id="{r1}"]').click()
        expect(page.locator("#detail-id")).to_have_text(f"#{r1}")
        page.locator("#relabel-success").click()
        row = page.locator(f'#pools tr[data-prompt-id="{cand}"]')
        expect(row).to_contain_text("rejected, but its labels now give 1/1", timeout=15_000)
        expect(page.locator('svg.plot[data-title="success per prompt (cumulative)"]')).to_have_attribute(
            "data-points", "1"
        )
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "operator_relabel_rejudge.png"), full_page=True)
        row.locator("button.admit").click()
        expect(row.locator("td").nth(1)).to_have_text("pool", timeout=15_000)
        assert store.prompt(cand).status == "pool" and store.episode(c1).success is False
        page.goto("about:blank")
    store.close()


def test_progress_pause_resume_cues_and_vlm_state(page: Page, tmp_path: Path) -> None:
    import threading

    from learner.loop.core import EpisodeLoop
    from learner.loop.settings import LoopSettings
    from pde_storage.service_states import run_control
    from tests.learner.loop.doubles import FakeActor, FakeRobot

    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    settings = LoopSettings.model_validate(
        dict(
            tasks=[TASK],
            auto_start=False,
            auto_label=False,
            max_episodes=2,
            max_chunks=10**6,
            poll_period_s=0.01,
        )
    )
    actor = FakeActor(chunk_time_s=0.02, n_chunks=3)
    loop = EpisodeLoop(store, FakeRobot(), actor, settings)
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    try:
        with ui_server(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}") as (base, _):
            page.goto(f"{base}/#token={TOKEN}")
            expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=15_000)
            expect(page).to_have_title("(!) reset the scene, press Start — PDE operator", timeout=5_000)
            expect(page.locator("#favicon")).to_have_attribute("data-state", "need")
            expect(page.locator("#progress")).to_contain_text("episodes today", timeout=10_000)
            expect(page.locator("#progress")).to_contain_text("bootstrap")
            page.keyboard.press("Enter")
            expect(page.locator("#awaiting")).to_be_visible(timeout=15_000)
            page.locator("#pause").click()  # takes effect after the episode in hand
            expect(page.locator("#pause")).to_have_text("resume run", timeout=10_000)
            assert run_control(store).paused is True
            [ep] = store.episodes()
            expect(page).to_have_title(f"(!) label #{ep.id} — PDE operator", timeout=5_000)
            expect(page.locator("#vlm")).to_contain_text("supervisor not running")
            page.keyboard.press("s")
            expect(page.locator("#phase")).to_have_text("paused", timeout=15_000)
            expect(page.locator("#progress")).to_contain_text("PAUSED")
            expect(page.locator("#favicon")).not_to_have_attribute("data-state", "need", timeout=5_000)
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "operator_paused.png"), full_page=True)
            page.locator("#pause").click()
            expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=15_000)
            assert run_control(store).paused is False
            assert [e.status for e in store.episodes()] == ["labelled"]
            actor.n_chunks = 10**6  # an episode that runs until it is aborted
            page.keyboard.press("Enter")
            expect(page.locator("#phase")).to_have_text("running", timeout=15_000)
            page.screenshot(path=str(SHOTS / "operator_running.png"), full_page=True)
            page.locator("#abort").click()
            expect(page.locator("#history tbody tr").first).to_contain_text("aborted", timeout=15_000)
            page.goto("about:blank")
    finally:
        loop.stop()
        t.join(10)
        store.close()
