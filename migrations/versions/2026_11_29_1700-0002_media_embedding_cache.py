"""media_embedding_cache: index of the persistent embedding cache

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "media_embedding_cache",
        sa.Column("cache_key", sa.String(length=64), primary_key=True),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("encoder_id", sa.String(length=64), nullable=False),
        sa.Column("media_kind", sa.String(length=8), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("storage_uri", sa.Text(), nullable=False),
        sa.Column("checksum", sa.String(length=64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("hit_count", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("last_hit_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("media_kind IN ('image', 'audio')", name="ck_media_embedding_cache_kind"),
    )
    op.create_index("ix_media_embedding_cache_content_hash", "media_embedding_cache", ["content_hash"])
    op.create_index("ix_media_embedding_cache_expires_at", "media_embedding_cache", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_media_embedding_cache_expires_at", table_name="media_embedding_cache")
    op.drop_index("ix_media_embedding_cache_content_hash", table_name="media_embedding_cache")
    op.drop_table("media_embedding_cache")
