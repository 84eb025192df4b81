"""A throwaway PostgreSQL cluster for tests: Debian's initdb + pg_ctl on a temp dir and a free
port, run as the ``postgres`` user when the tests run as root (the server refuses root)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from tests.helpers import free_port


def find_pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    which = shutil.which("initdb")
    return Path(which).parent if which else None


def _as_owner(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


def _start(bin_dir: Path, data: Path, sock: Path, log: Path) -> int:
    """Starts the server on a free port and returns the port; a port taken by another process in
    the meantime (PostgreSQL binds it only after initdb) gets another try on a new one."""
    for _ in range(3):
        port = free_port()
        opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
        started = subprocess.run(
            _as_owner(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-o",
                    opts,
                    "-l",
                    str(log),
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            capture_output=True,
            text=True,
        )
        if started.returncode == 0:
            return port
        text = log.read_text(errors="replace") if log.exists() else ""
        if "could not bind" not in text and "already in use" not in text:
            break
    raise RuntimeError(f"pg_ctl start failed ({started.returncode}): {started.stderr}\nserver log:\n{text}")


@contextmanager
def postgres_server() -> Iterator[str]:
    """Yields an admin URL ``postgresql+psycopg://postgres@127.0.0.1:PORT/postgres``."""
    bin_dir = find_pg_bin()
    if bin_dir is None:
        raise FileNotFoundError("PostgreSQL binaries (initdb, pg_ctl) not found; apt-get install postgresql")
    root = Path(tempfile.mkdtemp(prefix="pde-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
        root.chmod(0o755)
    subprocess.run(
        _as_owner(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        ),
        check=True,
        capture_output=True,
    )
    port = _start(bin_dir, data, sock, root / "log")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres").close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            _as_owner([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def create_database(admin_url: str, name: str) -> str:
    """A fresh database on the server; returns its URL."""
    base = admin_url.rsplit("/", 1)[0]
    conninfo = base.replace("postgresql+psycopg://", "postgresql://") + "/postgres"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{base}/{name}"
