"""pool kinds: usage rows name their endpoint and a transcription's seconds of audio (fresh and from the results
cache); prices get room for the per-second dimensions; a per-tenant results cache of transcripts

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-10 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("inference_requests") as requests:
        requests.add_column(sa.Column("endpoint", sa.String(16), nullable=False, server_default="chat"))
        requests.add_column(sa.Column("audio_ms", sa.Integer(), nullable=False, server_default="0"))
        requests.add_column(sa.Column("cached_audio_ms", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("model_prices") as prices:
        prices.alter_column("dimension", existing_type=sa.String(16), type_=sa.String(32))
    op.create_table(
        "transcription_cache",
        sa.Column("cache_key", sa.String(64), primary_key=True),
        sa.Column("tenant_id", sa.String(36), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("audio_ms", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_transcription_cache_created_at", "transcription_cache", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_transcription_cache_created_at", table_name="transcription_cache")
    op.drop_table("transcription_cache")
    with op.batch_alter_table("model_prices") as prices:
        prices.alter_column("dimension", existing_type=sa.String(32), type_=sa.String(16))
    with op.batch_alter_table("inference_requests") as requests:
        requests.drop_column("cached_audio_ms")
        requests.drop_column("audio_ms")
        requests.drop_column("endpoint")
