"""One loud truth when a service is down: a banner naming the service and the command that starts it.
The robot server is a real `pde robot-server --backend sim` process that the test stops; the loop's
and the supervisor's heartbeats are their rows in the real store, written here and then left to go
stale, as a killed process leaves them."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from pde_contract.intents import StartEpisode
from pde_storage import Store
from tests.helpers import free_port, subprocess_env
from tests.operator_ui.browser import SHOTS, sim_robot_server, ui_process, ui_server
from tests.operator_ui.conftest import TOKEN

pytestmark = [pytest.mark.browser]
# As the loop publishes a failed reset (the robot client's text, with its hint about link keys).
RESET_ERROR = (
    "reset failed: no reply to Reset from tcp://127.0.0.1:5556 within 2.0 s: is `pde robot-server` "
    "running and reachable (a server with link keys never answers a client without: set "
    "PDE_ROBOT_LINK_SERVER_KEY and PDE_ROBOT_LINK_CLIENT_KEY)?"
)


def test_dead_robot_server_gets_a_banner_with_the_command(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    banner = page.locator('#service-banner [data-service="robot_server"]')
    cmd_port = free_port()
    with ui_process(url, tmp_path, TOKEN, f"tcp://127.0.0.1:{cmd_port}") as base:
        with sim_robot_server(tmp_path, cmd_port=cmd_port):
            page.goto(f"{base}/#token={TOKEN}")
            expect(page.locator('.pill[data-service="robot_server"]')).to_have_class(
                "pill ok", timeout=20_000
            )
            expect(banner).to_have_count(0)
        # It has exited now (SIGTERM and waited for, as `docker compose stop` does; the page cannot
        # tell that from a crash: it only sees the observations stop).
        stopped_at = time.monotonic()
        expect(banner).to_contain_text("pde robot-server", timeout=20_000)
        print(f"robot-server banner {time.monotonic() - stopped_at:.2f} s after the server exited")
        expect(banner).to_contain_text("docker compose up -d robot_server")
        expect(page.locator("#robot-info")).to_have_text("robot server down: see the banner")
        expect(page.locator("#service-banner")).not_to_contain_text("PDE_ROBOT_LINK")
        page.goto("about:blank")


def test_dead_loop_and_supervisor_get_banners_with_the_command(page: Page, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/pde.db"
    store = Store.open(url, tmp_path / "media")
    store.set_service_state("supervisor", {"phase": "running"})  # then it "dies": no more beats
    alive = threading.Event()
    alive.set()

    def loop_heartbeat() -> None:
        while alive.is_set():
            store.set_service_state("loop", {"phase": "waiting_for_supervisor", "last_error": RESET_ERROR})
            time.sleep(0.2)

    beat = threading.Thread(target=loop_heartbeat, daemon=True)
    beat.start()
    robot = f"tcp://127.0.0.1:{free_port()}"
    try:
        with ui_server(url, tmp_path, TOKEN, robot, PDE_UI_SERVICE_STALE_S="2") as (base, _):
            page.goto(f"{base}/#token={TOKEN}")
            sup = page.locator('#service-banner [data-service="supervisor"]')
            expect(sup).to_contain_text("the loop waits for its candidate prompts", timeout=15_000)
            expect(sup).to_contain_text("pde supervisor")
            expect(sup).to_contain_text("docker compose up -d supervisor")
            expect(page.locator("#last-error")).to_contain_text("check that `pde robot-server` runs")
            expect(page.locator("#last-error")).not_to_contain_text("PDE_ROBOT_LINK")
            expect(page.locator("#favicon")).to_have_attribute("data-state", "down")
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / "operator_supervisor_down.png"))
            alive.clear()  # the loop dies too
            loop = page.locator('#service-banner [data-service="loop"]')
            expect(loop).to_contain_text("pde learner run", timeout=15_000)
            expect(loop).to_contain_text("last heard")
            page.goto("about:blank")
    finally:
        alive.clear()
        beat.join(5)
        store.close()


@contextmanager
def beating(url: str, media: Path, service: str) -> Iterator[subprocess.Popen[bytes]]:
    """tests/operator_ui/beating_service.py as a process: the service's row and heartbeat."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.operator_ui.beating_service", url, str(media), service],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"beating\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_kill9_of_the_loop_and_the_supervisor_is_bannered_in_seconds_and_start_refused(
    page: Page, tmp_path: Path
) -> None:
    """Default settings (PDE_UI_SERVICE_STALE_S, the services' heartbeat periods): a killed loop
    or supervisor is on the banner within 3 s (10 s before: the old stale threshold), and a Start
    pressed while the loop is dead is refused with the reason, never queued for a later loop."""
    url = f"sqlite:///{tmp_path}/pde.db"
    robot = f"tcp://127.0.0.1:{free_port()}"
    banner = page.locator("#service-banner")
    with (
        ui_server(url, tmp_path, TOKEN, robot) as (base, _),
        beating(url, tmp_path / "media", "loop") as loop,
        beating(url, tmp_path / "media", "supervisor") as sup,
    ):
        page.goto(f"{base}/#token={TOKEN}")
        for name in ("loop", "supervisor"):
            expect(page.locator(f'.pill[data-service="{name}"]')).to_have_class("pill ok", timeout=20_000)
        expect(banner.locator('[data-service="loop"]')).to_have_count(0)
        for name, proc in (("loop", loop), ("supervisor", sup)):
            proc.kill()  # SIGKILL: no "stopped" row, only the beats stop
            killed_at = time.monotonic()
            expect(banner.locator(f'[data-service="{name}"]')).to_contain_text("not running", timeout=6_000)
            print(f"{name} banner {time.monotonic() - killed_at:.2f} s after kill -9")
            expect(page.locator(f'.pill[data-service="{name}"]')).to_have_class("pill down")
        expect(page.locator("#start")).to_be_disabled()
        r = page.request.post(f"{base}/api/loop/start", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status == 409 and "not running" in r.json()["detail"], (r.status, r.text())
        store = Store.open(url, tmp_path / "media")
        try:
            assert store.pending_intents(StartEpisode) == []  # nothing queued for a later loop
        finally:
            store.close()
        page.goto("about:blank")
