"""files: what tenants upload to /v1/files (batch input, and the output and error files of batches)

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


def downgrade() -> None:
    op.drop_index("ix_files_expires_at", table_name="files")
    op.drop_index("ix_files_tenant_id", table_name="files")
    op.drop_table("files")
