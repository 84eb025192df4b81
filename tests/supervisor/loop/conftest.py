from tests.storage.conftest import db_url, pg_admin_url, store  # noqa: F401  (shared fixtures: SQLite + PostgreSQL)
