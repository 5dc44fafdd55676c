"""usage journal: the gateway instance that owns a running request, and each instance's heartbeat

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 13:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gateway_instances",
        sa.Column("id", sa.String(length=36), primary_key=True),
        sa.Column("hostname", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_gateway_instances_heartbeat_at", "gateway_instances", ["heartbeat_at"])
    with op.batch_alter_table("inference_requests") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=36), nullable=True))
        batch.create_index("ix_inference_requests_owner", ["owner"])
    # Settling orphans looks up running rows; most rows are settled, so the index stays small where it matters.
    op.create_index("ix_inference_requests_status", "inference_requests", ["status"])


def downgrade() -> None:
    op.drop_index("ix_inference_requests_status", table_name="inference_requests")
    with op.batch_alter_table("inference_requests") as batch:
        batch.drop_index("ix_inference_requests_owner")
        batch.drop_column("owner")
    op.drop_index("ix_gateway_instances_heartbeat_at", table_name="gateway_instances")
    op.drop_table("gateway_instances")
