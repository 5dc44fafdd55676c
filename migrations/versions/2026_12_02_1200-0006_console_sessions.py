"""console_sessions: console sign-ins, so that signing out ends them on the server

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id_hash", sa.String(length=64), primary_key=True),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("subject", sa.String(length=128), nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_console_sessions_issued_at", "console_sessions", ["issued_at"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_issued_at", table_name="console_sessions")
    op.drop_table("console_sessions")
