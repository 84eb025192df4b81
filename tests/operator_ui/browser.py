"""Helpers for browser tests: `pde ui` as a real process, headless Chromium from Debian."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import FloatRect, Page

from pde_storage import Store
from tests.helpers import free_port, pde_command, subprocess_env
from tests.storage.factories import finish_with_videos, make_episode_file

CHROMIUM = "/usr/bin/chromium"
TASK = "put_green_container_in_bowl"
# Screenshots of the page go to a scratch folder; set PDE_SCREENSHOT_DIR=bench/results/screenshots
# to refresh the committed ones (tests never rewrite tracked files by default).
SHOTS = Path(os.environ.get("PDE_SCREENSHOT_DIR", Path(tempfile.gettempdir()) / "pde-screenshots"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]


@contextmanager
def ui_process(db_url: str, data_dir: Path, token: str, robot_endpoint: str) -> Iterator[str]:
    with ui_server(db_url, data_dir, token, robot_endpoint) as (base, _):
        yield base


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL, as a crash would: no graceful shutdown the page could notice."""
    proc.kill()
    proc.wait(10)


@contextmanager
def ui_server(
    db_url: str, data_dir: Path, token: str, robot_endpoint: str, **settings: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`pde ui` as a process (``settings``: more PDE_UI_* variables; PDE_UI_PORT a port to reuse
    after a kill, else a free one); yields its base URL and the process (to kill it in a test)."""
    port = int(settings.pop("PDE_UI_PORT", "0")) or free_port()
    log = data_dir / "ui.log"
    env = subprocess_env(
        PDE_UI_DATABASE_URL=db_url,
        PDE_UI_DATA_DIR=str(data_dir),
        PDE_UI_PORT=str(port),
        PDE_UI_TOKEN=token,
        PDE_UI_ROBOT_CMD_ENDPOINT=robot_endpoint,
        PDE_UI_HOST="127.0.0.1",
        **settings,
    )
    proc = subprocess.Popen(pde_command("ui"), env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"pde ui exited: {log.read_text()}")
            try:
                with urllib.request.urlopen(base + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pde ui not healthy in 60 s: {log.read_text()}") from None
                time.sleep(0.1)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def sim_robot_server(
    log_dir: Path,
    image_size: str = "96x96",
    camera_fps: float = 15.0,
    cmd_port: int | None = None,
    **env: str,
) -> Iterator[str]:
    """`pde robot-server --backend sim` on free ports (or the given command port); yields its
    command endpoint. ``env``: more environment variables (e.g. PDE_DATA_DIR for its latches)."""
    from pde_contract.client import RobotClient, RobotServerError

    cmd_port, obs_port = cmd_port or free_port(), free_port()
    log = log_dir / "robot-server.log"
    proc = subprocess.Popen(
        pde_command(
            "robot-server",
            "--backend",
            "sim",
            "--cmd-port",
            str(cmd_port),
            "--obs-port",
            str(obs_port),
            "--image-size",
            image_size,
            "--camera-fps",
            str(camera_fps),
        ),
        env=subprocess_env(**env),
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    endpoint = f"tcp://127.0.0.1:{cmd_port}"
    try:
        deadline = time.monotonic() + 120
        with RobotClient(endpoint, name="test-wait", timeout_s=1.0) as c:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"robot server exited: {log.read_text()[-3000:]}")
                try:
                    c.connect()
                    c.latest_observation(timeout_s=2.0)
                    break
                except RobotServerError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"robot server not up in 120 s: {log.read_text()[-3000:]}"
                        ) from None
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ended_episodes(store: Store, n: int, stage: str = "bootstrap") -> list[int]:
    """``n`` episodes of TASK that ended with a video and await their label (no loop needed)."""
    store.ensure_task(TASK, "put the green container in the bowl")
    ids = []
    for _ in range(n):
        ep = store.create_episode(TASK, store.prompts(TASK)[0].id, 0, stage)
        finish_with_videos(store, ep.id, make_episode_file(ep.id, TASK, n_chunks=3))
        ids.append(ep.id)
    return ids


def box_of(page: Page, selector: str) -> FloatRect:
    box = page.locator(selector).bounding_box()
    assert box is not None, f"{selector} is not rendered"
    return box


def inside_viewport(box: FloatRect, width: int, height: int) -> bool:
    return (
        box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= width
        and box["y"] + box["height"] <= height
    )


def overlap(a: FloatRect, b: FloatRect) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


def choose(page: Page, select: str, value: str) -> None:
    """Pick ``value`` in one of the page's dropdowns (``select``: its hidden <select>, e.g.
    "#f-status") as a person does: open the page's list, click the option."""
    index = page.eval_on_selector(select, "(s, v) => [...s.options].findIndex((o) => o.value === v)", value)
    assert index >= 0, f"{select} has no option {value!r}"
    page.locator(f"{select}-button").click()
    page.locator(f'{select}-list [data-index="{index}"]').click()
