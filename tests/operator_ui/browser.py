"""Helpers for browser tests: `pde ui` as a real process, headless Chromium from Debian."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import free_port, pde_command, subprocess_env

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


@contextmanager
def ui_process(db_url: str, data_dir: Path, token: str, robot_endpoint: str) -> Iterator[str]:
    port = free_port()
    log = data_dir / "ui.log"
    env = subprocess_env(
        PDE_UI_DATABASE_URL=db_url, PDE_UI_DATA_DIR=str(data_dir), PDE_UI_PORT=str(port), PDE_UI_TOKEN=token,
        PDE_UI_ROBOT_CMD_ENDPOINT=robot_endpoint, PDE_UI_HOST="127.0.0.1",
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
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
