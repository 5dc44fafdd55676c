"""grounding: per-tenant guardrail policy, pass/fail per request, thumbs, regeneration fingerprints, question kinds

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenant_quota") as batch:
        batch.add_column(sa.Column("grounding_policy", sa.String(8), nullable=False, server_default="score"))
        batch.add_column(sa.Column("grounding_threshold", sa.Float(), nullable=False, server_default="0.9"))
    with op.batch_alter_table("inference_requests") as batch:
        batch.add_column(sa.Column("grounding_passed", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("question_kind", sa.String(24), nullable=True))
        batch.add_column(sa.Column("prompt_fingerprint", sa.String(64), nullable=True))
        batch.add_column(sa.Column("feedback", sa.Integer(), nullable=True))
        batch.create_index("ix_inference_requests_fingerprint", ["tenant_id", "prompt_fingerprint"])


def downgrade() -> None:
    with op.batch_alter_table("inference_requests") as batch:
        batch.drop_index("ix_inference_requests_fingerprint")
        batch.drop_column("feedback")
        batch.drop_column("prompt_fingerprint")
        batch.drop_column("question_kind")
        batch.drop_column("grounding_passed")
    with op.batch_alter_table("tenant_quota") as batch:
        batch.drop_column("grounding_threshold")
        batch.drop_column("grounding_policy")
