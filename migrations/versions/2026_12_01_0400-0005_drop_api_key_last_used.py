"""api_keys: drop last_used_at, which nothing ever wrote

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 04:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch mode: SQLite cannot drop a column in place
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("last_used_at")


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
