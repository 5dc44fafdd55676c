"""billing: model_prices, billing_outbox, stripe_customers, webhook_events

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29 19:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_prices",
        sa.Column("model", sa.String(length=64), primary_key=True),
        sa.Column("dimension", sa.String(length=16), primary_key=True),
        sa.Column("micros_per_million", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "billing_outbox",
        sa.Column("identifier", sa.String(length=96), primary_key=True),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("dimension", sa.String(length=16), nullable=False),
        sa.Column("quantity", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False, server_default="pending"),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_billing_outbox_request_id", "billing_outbox", ["request_id"])
    op.create_index("ix_billing_outbox_tenant_id", "billing_outbox", ["tenant_id"])
    op.create_index("ix_billing_outbox_status", "billing_outbox", ["status"])
    op.create_table(
        "stripe_customers",
        sa.Column("tenant_id", sa.String(length=36), primary_key=True),
        sa.Column("customer_id", sa.String(length=64), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "webhook_events",
        sa.Column("event_id", sa.String(length=96), primary_key=True),
        sa.Column("event_type", sa.String(length=96), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("webhook_events")
    op.drop_table("stripe_customers")
    op.drop_index("ix_billing_outbox_status", table_name="billing_outbox")
    op.drop_index("ix_billing_outbox_tenant_id", table_name="billing_outbox")
    op.drop_index("ix_billing_outbox_request_id", table_name="billing_outbox")
    op.drop_table("billing_outbox")
    op.drop_table("model_prices")
