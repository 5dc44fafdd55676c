"""grounding: new tenants' guardrail threshold defaults to 1.0 (every claim supported)

The scorer checks an answer fact by fact, so one unsupported fact is what a hallucination looks like; at 0.9 a long
answer with one wrong fact among ten still passed. Existing quotas keep the threshold they hold.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenant_quota") as batch:
        batch.alter_column("grounding_threshold", existing_type=sa.Float(), server_default="1.0")


def downgrade() -> None:
    with op.batch_alter_table("tenant_quota") as batch:
        batch.alter_column("grounding_threshold", existing_type=sa.Float(), server_default="0.9")
