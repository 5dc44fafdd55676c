"""stored responses and jobs: the Responses API's stored responses and the media blobs they use, per-tenant
storage settings, and the background job table

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenant_quota") as batch:
        batch.add_column(sa.Column("store_responses", sa.Boolean(), nullable=False, server_default=sa.true()))
        batch.add_column(sa.Column("response_retention_days", sa.Integer(), nullable=False, server_default="30"))
    op.create_table(
        "stored_responses",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(36), nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("previous_response_id", sa.String(64), nullable=True),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("input_items", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_stored_responses_tenant_id", "stored_responses", ["tenant_id"])
    op.create_index("ix_stored_responses_request_id", "stored_responses", ["request_id"])
    op.create_index("ix_stored_responses_previous_response_id", "stored_responses", ["previous_response_id"])
    op.create_index("ix_stored_responses_expires_at", "stored_responses", ["expires_at"])
    op.create_table(
        "stored_response_media",
        sa.Column("response_id", sa.String(64), sa.ForeignKey("stored_responses.id"), primary_key=True),
        sa.Column("sha256", sa.String(64), primary_key=True),
    )
    op.create_index("ix_stored_response_media_sha256", "stored_response_media", ["sha256"])
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.String(36), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_jobs_tenant_id", "jobs", ["tenant_id"])
    op.create_index("ix_jobs_status", "jobs", ["status"])


def downgrade() -> None:
    op.drop_index("ix_jobs_status", table_name="jobs")
    op.drop_index("ix_jobs_tenant_id", table_name="jobs")
    op.drop_table("jobs")
    op.drop_index("ix_stored_response_media_sha256", table_name="stored_response_media")
    op.drop_table("stored_response_media")
    op.drop_index("ix_stored_responses_expires_at", table_name="stored_responses")
    op.drop_index("ix_stored_responses_previous_response_id", table_name="stored_responses")
    op.drop_index("ix_stored_responses_request_id", table_name="stored_responses")
    op.drop_index("ix_stored_responses_tenant_id", table_name="stored_responses")
    op.drop_table("stored_responses")
    with op.batch_alter_table("tenant_quota") as batch:
        batch.drop_column("response_retention_days")
        batch.drop_column("store_responses")
