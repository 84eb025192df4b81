"""Every storage test runs on SQLite and on a real PostgreSQL server started here."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from pde_storage import Store
from tests.storage.postgres import create_database, find_pg_bin, postgres_server

_db_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL binaries (initdb/pg_ctl) are not installed: apt-get install postgresql")
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/pde.db"
    admin = request.getfixturevalue("pg_admin_url")
    return create_database(admin, f"pde_test_{next(_db_counter)}")


@pytest.fixture
def store(db_url: str, tmp_path: Path) -> Iterator[Store]:
    s = Store.open(db_url, tmp_path / "media")
    yield s
    s.close()
