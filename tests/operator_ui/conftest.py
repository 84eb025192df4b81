from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import Page, sync_playwright

from operator_ui.app import create_app
from operator_ui.robot_link import RobotLink
from operator_ui.settings import UISettings
from pde_storage import Store
from tests.helpers import free_port
from tests.operator_ui.browser import CHROMIUM, CHROMIUM_ARGS
from tests.storage.conftest import db_url, pg_admin_url, store  # noqa: F401  (shared fixtures)

TOKEN = "test-token-0123456789abcdef"
# The page answers only the hosts it knows (operator_ui/host_guard.py), not TestClient's "testserver".
LOCAL = "http://127.0.0.1"


@pytest.fixture
def client(store: Store, tmp_path: Path) -> Iterator[TestClient]:  # noqa: F811
    settings = UISettings.model_validate({"data_dir": tmp_path, "database_url": store.url})
    # A robot server that does not exist: the page must say so, not hang.
    link = RobotLink(f"tcp://127.0.0.1:{free_port()}", timeout_s=0.3)
    with TestClient(create_app(settings, TOKEN, store=store, robot_link=link), base_url=LOCAL) as c:
        yield c
    link.close()


AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def page() -> Iterator[Page]:
    """Debian's headless Chromium (never a downloaded browser)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Debian chromium not installed at {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1400, "height": 1000})
        yield pg
        pg.close()
        browser.close()
