"""Alembic environment: always run programmatically by ``pde_storage.Store.open`` (or
``pde_storage.migrate.upgrade``) with a live connection in ``config.attributes["connection"]``."""

from __future__ import annotations

from alembic import context

from pde_storage.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "pde_storage migrations run through pde_storage.migrate.upgrade(url), not the alembic CLI"
    )
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
