"""files and batches: what tenants upload to /v1/files, and the batches (with their lines) that read them

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-08 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(36), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_files_tenant_id", "files", ["tenant_id"])
    op.create_index("ix_files_expires_at", "files", ["expires_at"])
    op.create_table(
        "batches",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(36), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("input_file_id", sa.String(64), nullable=False),
        sa.Column("completion_window", sa.String(8), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_batches_tenant_id", "batches", ["tenant_id"])
    op.create_table(
        "batch_lines",
        sa.Column("batch_id", sa.String(64), sa.ForeignKey("batches.id"), primary_key=True),
        sa.Column("line", sa.Integer(), primary_key=True),
        sa.Column("custom_id", sa.String(512), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("ok", sa.Boolean(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("batch_lines")
    op.drop_index("ix_batches_tenant_id", table_name="batches")
    op.drop_table("batches")
    op.drop_index("ix_files_expires_at", table_name="files")
    op.drop_index("ix_files_tenant_id", table_name="files")
    op.drop_table("files")
