"""Alembic environment, for both ways migrations run:

- ``Store.open`` -> ``pde_storage.db.upgrade`` passes its live connection in
  ``config.attributes["connection"]`` (under PostgreSQL's advisory lock, so services that start
  together migrate once);
- the ``alembic`` CLI (``alembic.ini`` at the repository root) connects by itself to
  ``-x url=...``, else ``$PDE_DATABASE_URL``, else the default SQLite file; ``--sql`` writes the
  SQL instead of running it.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from pde_contract.settings import resolve_database_url
from pde_storage.db import make_engine, normalise_url
from pde_storage.models import Base


def _cli_url() -> str:
    return resolve_database_url(context.get_x_argument(as_dictionary=True).get("url"))


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


given = context.config.attributes.get("connection")
if given is not None:
    _run(given)
elif context.is_offline_mode():
    url = normalise_url(_cli_url())
    context.configure(
        url=url,
        target_metadata=Base.metadata,
        render_as_batch=url.startswith("sqlite"),
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    engine = make_engine(_cli_url())
    try:
        with engine.connect() as connection:
            _run(connection)
    finally:
        engine.dispose()
