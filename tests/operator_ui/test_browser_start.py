"""Start that means it: the page's Start is disabled (and Enter ignored) while the run is paused or
the E-STOP is latched, the page's server refuses the start intent in those states too, and the toast
reports what the loop did with the start (refused after a robot-server restart, or started with the
episode's id), never "started" before it has. The loop runs in this process with robot/actor doubles
(the page's own robot server is real where the E-STOP matters)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from learner.loop.core import EpisodeLoop
from learner.loop.settings import LoopSettings
from pde_contract.service_state import LOOP_ROW, LoopPhase, LoopState
from pde_storage import Store
from pde_storage.service_states import read_state
from tests.helpers import free_port
from tests.learner.loop.doubles import FakeActor, FakeRestartingRobot
from tests.operator_ui.browser import sim_robot_server, ui_process
from tests.operator_ui.conftest import TOKEN

pytestmark = [pytest.mark.browser]
TASK = "put_green_container_in_bowl"


@contextmanager
def waiting_loop(store: Store, robot: FakeRestartingRobot) -> Iterator[EpisodeLoop]:
    """The episode loop without auto-start, in a thread: it resets and waits for the page's Start."""
    manual: dict[str, Any] = {"auto_start": False, "auto_label": False, "rollouts_per_prompt": 10}
    settings = LoopSettings.model_validate(
        {"tasks": [TASK], "max_chunks": 2, "poll_period_s": 0.01, "error_backoff_s": 1.0, **manual}
    )
    loop = EpisodeLoop(store, robot, FakeActor(chunk_time_s=0.02, n_chunks=2), settings)
    t = threading.Thread(target=loop.run, daemon=True)
    t.start()
    try:
        yield loop
    finally:
        loop.stop()
        t.join(5)


def _awaiting_start_after_a_refusal(store: Store) -> bool:
    state, _ = read_state(store, LOOP_ROW, LoopState)
    return (
        state is not None
        and state.phase is LoopPhase.AWAITING_START
        and state.last_start is not None
        and state.last_start.refused is not None
    )


def _start_status(page: Page, base: str) -> tuple[int, str]:
    r = page.request.post(f"{base}/api/loop/start", headers={"Authorization": f"Bearer {TOKEN}"})
    return r.status, r.text()


def test_start_disabled_while_paused_and_the_toast_says_what_the_loop_did(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    robot = FakeRestartingRobot()
    with (
        waiting_loop(store, robot),
        ui_process(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{free_port()}") as base,
    ):
        page.goto(f"{base}/#token={TOKEN}")
        start, toast = page.locator("#start"), page.locator("#toast")
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=15_000)
        expect(start).to_be_enabled()
        page.locator("#pause").click()
        expect(start).to_be_disabled(timeout=5_000)
        expect(page.locator("#start-why")).to_contain_text("paused")
        page.keyboard.press("Enter")  # ignored while paused
        status, text = _start_status(page, base)
        assert status == 409 and "paused" in text, text
        assert store.episodes() == []
        page.locator("#pause").click()  # resume
        expect(start).to_be_enabled(timeout=5_000)

        # The robot server restarts while the operator resets the scene: the loop refuses the
        # start, and the page says so instead of "episode started".
        robot.restart()
        start.click()
        expect(toast).to_contain_text("NOT STARTED", timeout=10_000)
        expect(toast).to_contain_text("restarted")
        assert store.episodes() == []
        # The page may still show the phase from before the refusal (it polls): wait for the loop's
        # own row to be back at awaiting_start after it (its backoff, then a new reset).
        deadline = time.monotonic() + 15.0
        while not _awaiting_start_after_a_refusal(store):
            assert time.monotonic() < deadline, read_state(store, LOOP_ROW, LoopState)[0]
            time.sleep(0.05)
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=15_000)
        expect(start).to_be_enabled()
        page.keyboard.press("Enter")
        expect(toast).to_have_text(re.compile(r"^episode #\d+ started$"), timeout=10_000)
        [ep] = store.episodes()
        expect(toast).to_have_text(f"episode #{ep.id} started")
        page.goto("about:blank")
    store.close()


def test_start_disabled_and_refused_while_the_estop_is_latched(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    with (
        sim_robot_server(tmp_path) as endpoint,
        waiting_loop(store, FakeRestartingRobot()),
        ui_process(url, tmp_path, TOKEN, endpoint) as base,
    ):
        page.goto(f"{base}/#token={TOKEN}")
        start = page.locator("#start")
        expect(page.locator("#phase")).to_have_text("awaiting_start", timeout=15_000)
        expect(page.locator('.pill[data-service="robot_server"]')).to_have_class("pill ok", timeout=20_000)
        expect(start).to_be_enabled()
        page.locator("#estop").click()
        expect(start).to_be_disabled(timeout=5_000)
        expect(page.locator("#start-why")).to_contain_text("E-STOP latched")
        page.keyboard.press("Enter")
        status, text = _start_status(page, base)
        assert status == 409 and "E-STOP is latched" in text, text
        assert store.episodes() == []
        page.goto("about:blank")
    store.close()
