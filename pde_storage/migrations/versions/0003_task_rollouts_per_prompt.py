"""tasks: N, rollouts per prompt, written by the episode loop and read by the supervisor

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as b:  # batch: SQLite cannot alter tables in place
        b.add_column(sa.Column("rollouts_per_prompt", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as b:
        b.drop_column("rollouts_per_prompt")
