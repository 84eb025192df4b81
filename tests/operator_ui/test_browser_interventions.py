"""A person's takeovers on the page (issue 24.3), in headless Chromium against `pde ui` as a
process: per episode in the history and its entry, per prompt in the pools table."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from pde_storage import Store
from tests.helpers import free_port
from tests.operator_ui.browser import ui_server
from tests.operator_ui.conftest import TOKEN
from tests.storage.factories import finish_with_videos, make_episode_file, with_takeovers

pytestmark = [pytest.mark.browser]
TASK = "put_green_container_in_bowl"


def test_takeovers_per_episode_and_per_prompt(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    with Store.open(url, tmp_path / "media") as store:
        store.ensure_task(TASK, "put the green container in the bowl")
        pid = store.prompts(TASK)[0].id
        taken, alone = (store.create_episode(TASK, pid, 0, "rl").id for _ in range(2))
        finish_with_videos(store, taken, with_takeovers(make_episode_file(taken, TASK), [(1, 3), (5, 1)]))
        finish_with_videos(store, alone, make_episode_file(alone, TASK))
    with ui_server(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}") as (base, _):
        page.goto(f"{base}/#token={TOKEN}")
        row = page.locator(f'#history tr[data-episode-id="{taken}"]')
        expect(row.locator("td.takeovers")).to_have_text("2", timeout=15_000)
        expect(row.locator("td.takeovers")).to_have_attribute("title", "4 rows commanded by a person")
        expect(page.locator(f'#history tr[data-episode-id="{alone}"] td.takeovers')).to_have_text("—")
        row.click()
        expect(page.locator("#detail-meta")).to_contain_text("2 takeovers by a person (4 rows)")
        prompt_row = page.locator(f'#pools tr[data-prompt-id="{pid}"] td.takeovers')
        expect(prompt_row).to_have_text("2 in 1/2 episodes", timeout=15_000)
        page.goto("about:blank")
