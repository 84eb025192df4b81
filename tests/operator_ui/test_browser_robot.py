"""The page against the real robot server in simulation: live camera frames, and the e-stop
pressed in Chromium latches the robot (seen from another client), released with the token."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

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
        page.locator("#estop").click()
        expect(page.locator("#estop")).to_have_class("latched", timeout=5_000)
        st = observer.status()
        assert st.estopped is True and "operator" in st.estop_reason
        expect(page.locator("#robot-info")).to_have_text("E-STOP LATCHED", timeout=5_000)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "operator_estop_latched.png"), full_page=True)
        page.locator("#release").click()
        expect(page.locator("#toast")).to_contain_text("released", timeout=5_000)
        assert observer.status().estopped is False
        page.goto("about:blank")  # stop the page's polling before the servers go
