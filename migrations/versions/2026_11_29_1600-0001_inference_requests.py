"""inference_requests: one row per request that reached an engine

Revision ID: 0001
Revises:
Create Date: 2026-11-29 16:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inference_requests",
        sa.Column("request_id", sa.String(length=64), primary_key=True),
        sa.Column("model_variant", sa.String(length=64), nullable=False),
        sa.Column("modality_mask", sa.Integer(), nullable=False),
        sa.Column("text_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("vision_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("audio_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("cached_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("output_tokens", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("ttft_ms", sa.Integer(), nullable=True),
        sa.Column("total_latency_ms", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("modality_mask BETWEEN 1 AND 7", name="ck_inference_requests_modality_mask"),
    )
    op.create_index("ix_inference_requests_model_variant", "inference_requests", ["model_variant"])
    op.create_index("ix_inference_requests_created_at", "inference_requests", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_inference_requests_created_at", table_name="inference_requests")
    op.drop_index("ix_inference_requests_model_variant", table_name="inference_requests")
    op.drop_table("inference_requests")
