"""conversations: named conversations (`/v1/conversations`), their ordered items and the media blobs they use, and
the conversation a stored response joined

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-14 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(36), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("next_seq", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_conversations_tenant_id", "conversations", ["tenant_id"])
    op.create_index("ix_conversations_expires_at", "conversations", ["expires_at"])
    op.create_table(
        "conversation_items",
        sa.Column("conversation_id", sa.String(64), sa.ForeignKey("conversations.id"), primary_key=True),
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("item", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ux_conversation_items_seq", "conversation_items", ["conversation_id", "seq"], unique=True)
    op.create_table(
        "conversation_media",
        sa.Column("conversation_id", sa.String(64), sa.ForeignKey("conversations.id"), primary_key=True),
        sa.Column("item_id", sa.String(64), primary_key=True),
        sa.Column("sha256", sa.String(64), primary_key=True),
    )
    op.create_index("ix_conversation_media_sha256", "conversation_media", ["sha256"])
    with op.batch_alter_table("stored_responses") as responses:
        responses.add_column(sa.Column("conversation_id", sa.String(64), nullable=True))
        responses.create_index("ix_stored_responses_conversation_id", ["conversation_id"])


def downgrade() -> None:
    with op.batch_alter_table("stored_responses") as responses:
        responses.drop_index("ix_stored_responses_conversation_id")
        responses.drop_column("conversation_id")
    op.drop_index("ix_conversation_media_sha256", table_name="conversation_media")
    op.drop_table("conversation_media")
    op.drop_index("ux_conversation_items_seq", table_name="conversation_items")
    op.drop_table("conversation_items")
    op.drop_index("ix_conversations_expires_at", table_name="conversations")
    op.drop_index("ix_conversations_tenant_id", table_name="conversations")
    op.drop_table("conversations")
