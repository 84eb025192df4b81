"""intents: error, why a reader could not take the intent (an unknown kind, a malformed payload);
the row is then consumed and kept to be seen

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("intents") as b:  # batch: SQLite cannot alter tables in place
        b.add_column(sa.Column("error", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("intents") as b:
        b.drop_column("error")
