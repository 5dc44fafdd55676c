"""grounding evidence: a tenant's guardrail names what checks its answers' claims (label_head, judge or both), and
a usage row keeps each checked claim with the evidence that spoke to it

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-13 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenant_quota") as quota:
        quota.add_column(sa.Column("grounding_evidence", sa.String(10), nullable=False, server_default="label_head"))
    with op.batch_alter_table("inference_requests") as requests:
        requests.add_column(sa.Column("grounding_checked", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("inference_requests") as requests:
        requests.drop_column("grounding_checked")
    with op.batch_alter_table("tenant_quota") as quota:
        quota.drop_column("grounding_evidence")
