"""billing_outbox: leases for replicas (claimed_by, claimed_until), idempotency key generation, dead letters

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch mode: SQLite cannot drop columns in place (downgrade), and one table rebuild covers all of it
    with op.batch_alter_table("billing_outbox") as batch:
        batch.add_column(sa.Column("claimed_by", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("key_generation", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("dead_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("dead_reason", sa.Text(), nullable=True))
        # The claim reads due rows by (status, next_attempt_at); the status-only index becomes redundant.
        batch.drop_index("ix_billing_outbox_status")
        batch.create_index("ix_billing_outbox_due", ["status", "next_attempt_at"])


def downgrade() -> None:
    # Dead letters were never sent and must not be sent after a downgrade either: they stay out of "pending", and
    # their reason survives in last_error.
    op.execute("UPDATE billing_outbox SET last_error = dead_reason WHERE status = 'dead'")
    with op.batch_alter_table("billing_outbox") as batch:
        batch.drop_index("ix_billing_outbox_due")
        batch.create_index("ix_billing_outbox_status", ["status"])
        batch.drop_column("dead_reason")
        batch.drop_column("dead_at")
        batch.drop_column("key_generation")
        batch.drop_column("claimed_until")
        batch.drop_column("claimed_by")
