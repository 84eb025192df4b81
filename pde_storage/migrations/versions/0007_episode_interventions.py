"""episodes: n_interventions and n_person_rows, a person's takeovers during the episode and the
rows they commanded (0 for episodes from before these columns: none had a takeover recorded here)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("episodes") as b:  # batch: SQLite cannot alter tables in place
        b.add_column(sa.Column("n_interventions", sa.Integer(), nullable=False, server_default="0"))
        b.add_column(sa.Column("n_person_rows", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("episodes") as b:
        b.drop_column("n_person_rows")
        b.drop_column("n_interventions")
