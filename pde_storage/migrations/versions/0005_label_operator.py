"""labels: operator, the name the person who gave the label set in their browser ("" for the
simulator, the VLM and labels from before this column)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("labels") as b:  # batch: SQLite cannot alter tables in place
        b.add_column(sa.Column("operator", sa.String(100), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("labels") as b:
        b.drop_column("operator")
