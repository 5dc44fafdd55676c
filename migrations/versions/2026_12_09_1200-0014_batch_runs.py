"""batch runs: jobs wait until a moment and remember when their tenant was last served; usage rows carry their
priority class (batch lines bill at the batch price); meter dimensions get room for the batch ones

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-09 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True))
        jobs.add_column(sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE jobs SET ready_at = created_at")
    with op.batch_alter_table("jobs") as jobs:
        jobs.alter_column("ready_at", existing_type=sa.DateTime(timezone=True), nullable=False)
    op.create_index("ix_jobs_ready_at", "jobs", ["ready_at"])
    with op.batch_alter_table("inference_requests") as requests:
        requests.add_column(sa.Column("priority", sa.String(16), nullable=False, server_default="interactive"))
    with op.batch_alter_table("billing_outbox") as outbox:
        outbox.alter_column("dimension", existing_type=sa.String(16), type_=sa.String(32))


def downgrade() -> None:
    with op.batch_alter_table("billing_outbox") as outbox:
        outbox.alter_column("dimension", existing_type=sa.String(32), type_=sa.String(16))
    with op.batch_alter_table("inference_requests") as requests:
        requests.drop_column("priority")
    op.drop_index("ix_jobs_ready_at", table_name="jobs")
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_column("claimed_at")
        jobs.drop_column("ready_at")
