"""Requests the page must not act on: a foreign Host (DNS rebinding) or Origin (another site's
page), on every route; and ids no database row can have, on every route with an integer in its
path or query (the routes are read from the app, so a new one is covered without editing this)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import sync_playwright

from operator_ui.host_guard import allowed_hosts, origin_problem, split_host
from operator_ui.settings import UISettings
from pde_storage.models import ROW_ID_MAX
from tests.helpers import free_port
from tests.operator_ui.browser import CHROMIUM, CHROMIUM_ARGS, ui_server
from tests.operator_ui.conftest import AUTH, TOKEN

# A valid body per request model, so that a 404/422 is about the id and not the body. A new route
# with a body model not listed here fails the test with its name: add an example.
BODIES: dict[str, dict[str, Any]] = {
    "LabelIn": {"success": True},
    "DiscardIn": {"reason": "test"},
    "NoteIn": {"note": "test"},
    "EStopIn": {},
    "EndIn": {"success": True},
    "PauseIn": {"paused": True},
    "TeleopCommandIn": {},
    "RecordResetIn": {},
    "RecordSaveIn": {},
}
# Integers no row can have: one past PostgreSQL's INTEGER (the id columns), 2^63 (one past SQLite's
# and BIGINT), the 10^23; and ids below the first.
OVERSIZED = [str(ROW_ID_MAX + 1), str(2**63), "99999999999999999999999", "0", "-1"]


def _operations(client: TestClient) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, OpenAPI operation) of every route the app documents (all but / and /static)."""
    paths = client.app.openapi()["paths"]  # type: ignore[attr-defined]
    return [(m.upper(), path, op) for path, ops in paths.items() for m, op in ops.items()]


def _int_params(op: dict[str, Any], where: str) -> list[str]:
    def is_int(schema: dict[str, Any]) -> bool:
        return schema.get("type") == "integer" or any(
            s.get("type") == "integer" for s in schema.get("anyOf", [])
        )

    return [p["name"] for p in op.get("parameters", []) if p["in"] == where and is_int(p["schema"])]


def _url(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{(\w+)(:\w+)?\}", lambda m: values.get(m.group(1), "x"), path)


def _send(client: TestClient, method: str, path: str, op: dict[str, Any], **kwargs: Any) -> Any:
    body = None
    ref = (
        op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
    )
    if ref:
        name = ref.rsplit("/", 1)[1]
        assert name in BODIES, f"{method} {path}: add an example {name} body to BODIES"
        body = BODIES[name]
    return client.request(method, path, json=body, **{"headers": AUTH, **kwargs})


def test_every_route_answers_ids_no_row_can_have_with_422_and_absent_ones_with_404(
    client: TestClient,
) -> None:
    covered = []
    for method, path, op in _operations(client):
        for name in _int_params(op, "path"):
            covered.append(path)
            for bad in OVERSIZED:
                r = _send(client, method, _url(path, {name: bad}), op)
                assert r.status_code == 422, (method, path, bad, r.status_code, r.text)
                assert name in r.text, r.text  # the error names the parameter
            r = _send(client, method, _url(path, {name: str(ROW_ID_MAX)}), op)  # could exist, does not
            assert r.status_code == 404, (method, path, r.status_code, r.text)
        for name in _int_params(op, "query"):
            covered.append(f"{path}?{name}")
            for bad in OVERSIZED:
                r = _send(client, method, _url(path, {}), op, params={name: bad})
                assert r.status_code == 422, (method, path, name, bad, r.status_code, r.text)
            if name != "limit":
                r = _send(client, method, _url(path, {}), op, params={name: str(ROW_ID_MAX)})
                assert r.status_code == 200, (method, path, name, r.status_code, r.text)
    # The enumeration found what the page has today (so it cannot pass by finding nothing).
    assert "/api/episodes/{episode_id}/label" in covered and "/api/prompts/{prompt_id}/admit" in covered
    assert "/api/episodes?before_id" in covered and "/api/episodes?prompt_id" in covered


@pytest.mark.parametrize("host", ["evil.example", "rebind.evil.example:80", "127.0.0.1.evil.example"])
def test_a_foreign_host_gets_421_on_every_route(client: TestClient, host: str) -> None:
    for method, path, op in _operations(client):
        r = _send(client, method, _url(path, {}), op, headers={**AUTH, "Host": host})
        assert r.status_code == 421, (method, path, r.status_code, r.text)
        assert "PDE_UI_ALLOWED_HOSTS" in r.json()["detail"]
    for path in ("/", "/static/app.js", "/healthz"):
        assert client.get(path, headers={"Host": host}).status_code == 421
    assert client.post("/api/robot/estop", headers={"Host": host}).status_code == 421


LOCAL_HOSTS = ["127.0.0.1:8000", "localhost", "LOCALHOST.:8000", "[::1]:8000", "127.0.0.2"]


@pytest.mark.parametrize("host", LOCAL_HOSTS)
def test_local_hosts_are_answered(client: TestClient, host: str) -> None:
    assert client.get("/healthz", headers={"Host": host}).status_code == 200


def test_a_foreign_origin_cannot_change_anything(client: TestClient) -> None:
    """The E-STOP needs no token: a cross-site form or fetch with the page's own Host must still not
    reach it. (The robot server is absent here: a request that reached the route answers 503.)"""
    for origin in (
        "http://evil.example",
        "null",
        "http://127.0.0.1:3000",
        "https://127.0.0.1:8443",
        "file://",
    ):
        r = client.post("/api/robot/estop", headers={"Origin": origin})
        assert r.status_code == 403, (origin, r.status_code, r.text)
        assert "nothing was changed" in r.json()["detail"]
        r = client.post("/api/loop/start", headers={**AUTH, "Origin": origin})
        assert r.status_code == 403, (origin, r.status_code)
    # The page itself, and a script that sends no Origin, reach the route.
    assert client.post("/api/robot/estop", headers={"Origin": "http://127.0.0.1"}).status_code == 503
    assert client.post("/api/robot/estop").status_code == 503
    # A read is no change: Origin is not asked for (the browser's same-origin rule guards reads).
    assert client.get("/api/state", headers={"Origin": "http://evil.example"}).status_code == 200


def test_allowed_hosts_come_from_the_bind_address_and_the_setting(tmp_path: Path) -> None:
    s = UISettings.model_validate(
        {"data_dir": tmp_path, "host": "0.0.0.0", "allowed_hosts": "pde-cell.lab.local, 192.168.1.20"}
    )
    hosts = allowed_hosts(s.host, s.allowed_host_names)
    assert {"pde-cell.lab.local", "192.168.1.20", "localhost", "127.0.0.1", "::1"} <= hosts
    assert "0.0.0.0" not in hosts
    assert "10.0.0.5" in allowed_hosts("10.0.0.5", ())
    assert split_host("[fe80::1]:8000") == ("fe80::1", 8000)
    assert origin_problem("http://pde-cell.lab.local:8000", "pde-cell.lab.local:8000", hosts) is None
    assert origin_problem("https://pde-cell.lab.local", "pde-cell.lab.local", hosts) is None  # TLS proxy
    assert origin_problem("http://pde-cell.lab.local:9000", "pde-cell.lab.local:8000", hosts)
    with pytest.raises(ValueError, match="PDE_UI_ALLOWED_HOSTS"):
        UISettings.model_validate({"data_dir": tmp_path, "allowed_hosts": "http://pde-cell/"})


@pytest.fixture
def rebinding_browser() -> Iterator[Any]:
    """Chromium whose resolver sends evil.example to 127.0.0.1: a DNS-rebinding page, as the
    operator's browser would meet one."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Debian chromium not installed at {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[*CHROMIUM_ARGS, "--host-resolver-rules=MAP evil.example 127.0.0.1"],
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.mark.browser
def test_a_rebinding_page_in_chromium_reads_and_stops_nothing(rebinding_browser: Any, tmp_path: Path) -> None:
    robot = f"tcp://127.0.0.1:{free_port()}"
    with ui_server(f"sqlite:///{tmp_path}/pde.db", tmp_path, TOKEN, robot) as (base, _):
        port = base.rsplit(":", 1)[1]
        page = rebinding_browser.new_page()
        try:
            evil = f"http://evil.example:{port}"
            r = page.goto(f"{evil}/")
            assert r is not None and r.status == 421, r.status if r else None
            # The rebinding page's own scripts, same-origin with evil.example, read and press nothing.
            got = page.evaluate(
                """async () => {
                    const out = [];
                    const asks = [["GET", "/api/state"], ["GET", "/api/episodes"],
                                  ["GET", "/api/cameras/external.jpg"], ["POST", "/api/robot/estop"]];
                    for (const [m, p] of asks) {
                        const r = await fetch(p, {method: m, body: m === "POST" ? "{}" : undefined});
                        out.push(r.status);
                    }
                    return out;
                }"""
            )
            assert got == [421, 421, 421, 421], got
            # The page by its own name still works in the same browser.
            r = page.goto(f"{base}/#token={TOKEN}")
            assert r is not None and r.status == 200
        finally:
            page.close()
