"""The page against the real robot server in simulation: live camera frames, and the e-stop
pressed in Chromium latches the robot (seen from another client), released with the token; an
e-stop latched before the robot server restarted is shown by the page after the restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.helpers import free_port
from tests.operator_ui.browser import SHOTS, sim_robot_server, ui_process
from tests.operator_ui.conftest import TOKEN

pytestmark = [pytest.mark.browser]


def test_live_view_and_estop(page: Page, tmp_path: Path) -> None:
    from pde_contract.client import RobotClient

    with (
        sim_robot_server(tmp_path) as endpoint,
        ui_process(f"sqlite:///{tmp_path}/pde.db", tmp_path, TOKEN, endpoint) as base,
        RobotClient(endpoint, name="test-observer", timeout_s=2.0) as observer,
    ):
        observer.connect()
        assert observer.status().estopped is False
        page.goto("about:blank")  # stop the page's polling before the servers go
        page.goto(f"{base}/#token={TOKEN}")
        for cam in ("external", "wrist"):
            page.wait_for_function(
                f"() => {{ const i = document.querySelector('#cam-{cam}');"
                " return i.complete && i.naturalWidth > 0; }",
                timeout=20_000,
            )
        expect(page.locator('.pill[data-service="robot_server"]')).to_have_class("pill ok", timeout=10_000)
        # The workspace box in force (the sim has no dynamics factor to show).
        expect(page.locator("#robot-limits")).to_have_text("box x 0.150…0.750 y -0.500…0.500 z 0.015…0.550 m")
        small = page.locator("#cam-external").bounding_box()
        page.locator("#cam-external").click()  # enlarge
        big = page.locator("#cam-external").bounding_box()
        assert small and big and big["width"] > small["width"] * 1.5, (small, big)
        page.locator("#cam-external").click()
        page.locator("#estop").click()
        expect(page.locator("#estop")).to_have_class("latched", timeout=5_000)
        st = observer.status()
        assert st.estopped is True and "operator" in st.estop_reason
        expect(page.locator("#robot-info")).to_have_text("E-STOP LATCHED", timeout=5_000)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "operator_estop_latched.png"), full_page=True)
        page.locator("#release").click()  # first click: "stand clear", nothing sent yet
        expect(page.locator("#release")).to_contain_text("STAND CLEAR")
        assert observer.status().estopped is True
        page.locator("#release").click()
        expect(page.locator("#toast")).to_contain_text("released", timeout=5_000)
        assert observer.status().estopped is False
        page.goto("about:blank")  # stop the page's polling before the servers go


def test_failed_estop_never_runs_later_and_a_dead_server_shows_stale(page: Page, tmp_path: Path) -> None:
    """E-STOP pressed while the robot server is down is reported failed and dropped: the server
    that comes up on that port afterwards is not e-stopped. When the server dies, the live view is
    badged stale and its pill goes red."""
    from pde_contract.client import RobotClient

    cmd_port = free_port()
    endpoint = f"tcp://127.0.0.1:{cmd_port}"
    with ui_process(f"sqlite:///{tmp_path}/pde.db", tmp_path, TOKEN, endpoint) as base:
        page.goto(f"{base}/#token={TOKEN}")
        expect(page.locator("#stale-external")).to_have_text("no frame", timeout=10_000)
        page.locator("#estop").click()
        expect(page.locator("#toast")).to_contain_text("E-STOP NOT CONFIRMED", timeout=10_000)
        expect(page.locator("#toast")).to_contain_text("will not run later")
        with (
            sim_robot_server(tmp_path, cmd_port=cmd_port),
            RobotClient(endpoint, name="test-observer", timeout_s=2.0) as observer,
        ):
            observer.connect()
            expect(page.locator('.pill[data-service="robot_server"]')).to_have_class(
                "pill ok", timeout=20_000
            )
            expect(page.locator("#stale-external")).to_be_hidden(timeout=10_000)
            # The page's clients are connected now: a queued e-stop would have arrived.
            status = observer.status()
            assert status.estopped is False, status.estop_reason
            assert observer.status().counters.commands_total >= 1
        expect(page.locator("#stale-external")).to_contain_text("STALE", timeout=10_000)
        expect(page.locator("#stale-wrist")).to_contain_text("s old")
        expect(page.locator('.pill[data-service="robot_server"]')).to_have_class("pill down", timeout=10_000)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "operator_robot_server_dead.png"), full_page=True)
        page.goto("about:blank")


def test_the_page_shows_an_estop_restored_after_a_robot_server_restart(page: Page, tmp_path: Path) -> None:
    from pde_contract.client import RobotClient

    latches = str(tmp_path / "robot-data")
    with (
        sim_robot_server(tmp_path, PDE_DATA_DIR=latches) as endpoint,
        RobotClient(endpoint, name="test") as c,
    ):
        c.connect()
        c.estop("operator pressed e-stop on the page")
    with (
        sim_robot_server(tmp_path, PDE_DATA_DIR=latches) as endpoint,
        ui_process(f"sqlite:///{tmp_path}/pde.db", tmp_path, TOKEN, endpoint) as base,
    ):
        page.goto(f"{base}/#token={TOKEN}")
        expect(page.locator("#estop-banner")).to_be_visible(timeout=15_000)
        expect(page.locator("#estop-reason")).to_contain_text("before the robot server restarted")
        expect(page.locator("#estop-reason")).to_contain_text("operator pressed e-stop on the page")
        expect(page.locator("#estop")).to_have_class("latched")
        page.goto("about:blank")  # stop the page's polling before the servers go
