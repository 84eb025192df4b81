"""episodes: discard (kept, excluded from training and statistics, undoable) and an operator note

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("episodes") as b:  # batch: SQLite cannot alter tables in place
        b.add_column(sa.Column("discarded_at", sa.DateTime(timezone=True), nullable=True))
        b.add_column(sa.Column("discard_reason", sa.Text, nullable=False, server_default=""))
        b.add_column(sa.Column("status_before_discard", sa.String(20), nullable=False, server_default=""))
        b.add_column(sa.Column("note", sa.Text, nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("episodes") as b:
        for name in ("note", "status_before_discard", "discard_reason", "discarded_at"):
            b.drop_column(name)
