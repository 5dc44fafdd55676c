"""tenants, api_keys, tenant_quota; tenant, cost and grounding columns on inference_requests

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _new_usage_columns() -> list[sa.Column]:  # type: ignore[type-arg]
    return [
        sa.Column("tenant_id", sa.String(length=36), nullable=True),
        sa.Column("api_key_id", sa.String(length=36), nullable=True),
        sa.Column("cached_image_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("cached_audio_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("cost_micros", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("grounding_score", sa.Float(), nullable=True),
    ]


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(length=36), primary_key=True),
        sa.Column("name", sa.String(length=128), nullable=False, unique=True),
        sa.Column("status", sa.String(length=16), nullable=False, server_default="active"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=36), primary_key=True),
        sa.Column("tenant_id", sa.String(length=36), sa.ForeignKey("tenants.id"), nullable=True),
        sa.Column("prefix", sa.String(length=32), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False, unique=True),
        sa.Column("name", sa.String(length=128), nullable=False, server_default=""),
        sa.Column("is_admin", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("allowed_models", sa.Text(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"])
    op.create_index("ix_api_keys_prefix", "api_keys", ["prefix"])
    op.create_table(
        "tenant_quota",
        sa.Column("tenant_id", sa.String(length=36), sa.ForeignKey("tenants.id"), primary_key=True),
        sa.Column("tokens_per_minute", sa.Integer(), nullable=False),
        sa.Column("concurrent_requests", sa.Integer(), nullable=False),
        sa.Column("monthly_token_budget", sa.BigInteger(), nullable=True),
        sa.Column("monthly_cost_budget_micros", sa.BigInteger(), nullable=True),
        sa.Column("tier", sa.String(length=32), nullable=False, server_default="standard"),
    )
    with op.batch_alter_table("inference_requests") as batch:
        for column in _new_usage_columns():
            batch.add_column(column)
        batch.create_index("ix_inference_requests_tenant_created", ["tenant_id", "created_at"])


def downgrade() -> None:
    with op.batch_alter_table("inference_requests") as batch:
        batch.drop_index("ix_inference_requests_tenant_created")
        for column in reversed(_new_usage_columns()):
            batch.drop_column(column.name)
    op.drop_table("tenant_quota")
    op.drop_index("ix_api_keys_prefix", table_name="api_keys")
    op.drop_index("ix_api_keys_tenant_id", table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_table("tenants")
