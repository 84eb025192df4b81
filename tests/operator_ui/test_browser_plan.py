"""A day you can plan (issue 26 item 6), in headless Chromium against `pde ui` and a sim robot
server as processes: episodes done / target, cycle time, a PPO ETA that counts the bootstrap,
curves with a legend, PPO-update marks and success per policy version, the running episode's
chunk count (counted from the robot server's observations) and elapsed time, and "no VLM (offline
proposer)". The loop and the supervisor are represented by the state rows they publish; the test
submits the running episode's chunks to the robot server itself, as the actor would."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from playwright.sync_api import Page, expect

from pde_contract.client import RobotClient
from pde_contract.messages import ActionChunk, ActionSpace
from pde_storage import Store
from tests.operator_ui.browser import SHOTS, TASK, ended_episodes, sim_robot_server, ui_server
from tests.operator_ui.conftest import TOKEN
from tests.storage.factories import make_episode_file

pytestmark = [pytest.mark.browser]
N_CHUNKS = 3


def _run_chunks(endpoint: str, episode_id: int, n: int) -> None:
    """``n`` chunks of about 0.6 s each for ``episode_id``, one after the other."""
    with RobotClient(endpoint, name="test-actor", timeout_s=5.0) as c:
        info = c.connect()
        rows = max(4, int(0.6 * info.control_rate_hz))
        for seq in range(1, n + 1):
            a = np.zeros((rows, 7), np.float32)
            a[:, 6] = 0.08
            c.submit_chunk(
                ActionChunk(
                    seq=seq,
                    episode_id=str(episode_id),
                    action_space=ActionSpace.EE_DELTA,
                    actions=a,
                    control_rate_hz=info.control_rate_hz,
                )
            )
            deadline = time.monotonic() + 30
            while (st := c.status()).executing_chunk_seq == seq and st.steps_remaining > 0:
                assert time.monotonic() < deadline, "a chunk of 0.6 s did not end in 30 s"
                time.sleep(0.05)


def test_progress_eta_curves_running_episode_and_offline_proposer(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    [waiting] = ended_episodes(store, 1)  # awaits its label: the VLM line shows
    store.set_task_state(TASK, rollouts_per_prompt=2)
    a = store.add_prompt(TASK, "place the green box into the bowl", source="offline", iteration=1)
    b = store.add_prompt(TASK, "drop the green container in the bowl", source="offline", iteration=1)
    for prompt, outcomes in ((a, (True, False)), (b, (False,))):
        for ok in outcomes:
            ep = store.create_episode(TASK, prompt.id, 0, "bootstrap")
            store.finish_episode(ep.id, make_episode_file(ep.id, TASK, n_chunks=2))
            store.add_label(ep.id, ok)
    store.add_checkpoint(1, tmp_path / "v1.ckpt", {"trained_through_episode_id": float(ep.id)})
    running = store.create_episode(TASK, store.prompts(TASK, "canonical")[0].id, 1, "bootstrap")
    # What the loop and the supervisor publish (their state rows).
    store.set_service_state(
        "loop",
        {
            "phase": "running",
            "episode_id": running.id,
            "task": TASK,
            "labels_until_update": 4,
            "batch_size": 4,
        },
    )
    store.set_service_state(
        "supervisor",
        {
            "phase": "running",
            "proposer": "offline",
            "vlm_available": True,
            # its pool rule, which the page's ETA counts the bootstrap with
            "iterations_t0": 3,
            "candidates_k": 2,
            "pool_min_m": 3,
        },
    )
    with (
        sim_robot_server(tmp_path) as endpoint,
        ui_server(
            url, tmp_path, TOKEN, endpoint, PDE_UI_EPISODES_TARGET="128", PDE_UI_SERVICE_STALE_S="3600"
        ) as (base, _),
    ):
        page.goto(f"{base}/#token={TOKEN}")
        expect(page.locator("#awaiting")).to_have_attribute("data-episode-id", str(waiting), timeout=15_000)
        expect(page.locator("#vlm")).to_contain_text("no VLM (offline proposer)")
        expect(page.locator("#episodes-done")).to_contain_text(f"{len(store.episodes())}/128", timeout=10_000)
        expect(page.locator("#cycle")).to_contain_text("per cycle")
        # The task is in the bootstrap: the ETA is a range, and says what it is made of (the bounds
        # themselves are checked in test_run_progress.py).
        eta = page.locator("#ppo-eta")
        expect(eta).to_contain_text("at least")
        assert "the bootstrap" in (eta.get_attribute("title") or "")

        _run_chunks(endpoint, running.id, N_CHUNKS)
        info = page.locator("#running-info")
        expect(info).to_contain_text(f"episode #{running.id} · {N_CHUNKS} chunks", timeout=20_000)

        legend = page.locator('.legend[data-for="success per prompt (cumulative)"] span')
        expect(legend).to_have_count(2, timeout=15_000)
        expect(legend.first).to_contain_text("place the green box into the bowl")
        expect(
            page.locator('svg[data-title="success per prompt (cumulative)"] g.ppo-mark[data-version="v1"]')
        ).to_have_count(1)
        expect(page.locator(".by-version")).to_contain_text("policy v0: 33% of 3")
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "operator_day_plan.png"), full_page=True)
        page.goto("about:blank")
    store.close()
