"""routing policy: a tenant's quota names what `model: "auto"` does (heuristic, cascade, weakest or strongest), and a
usage row keeps the route it took and, for a second attempt (a cascade's escalation or a guardrail's
regeneration), the request it followed

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-15 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenant_quota") as quota:
        quota.add_column(sa.Column("routing_policy", sa.String(16), nullable=False, server_default="heuristic"))
    with op.batch_alter_table("inference_requests") as requests:
        requests.add_column(sa.Column("route_reason", sa.String(96), nullable=True))
        requests.add_column(sa.Column("attempt_of", sa.String(64), nullable=True))
        requests.create_index("ix_inference_requests_attempt_of", ["attempt_of"])


def downgrade() -> None:
    with op.batch_alter_table("inference_requests") as requests:
        requests.drop_index("ix_inference_requests_attempt_of")
        requests.drop_column("attempt_of")
        requests.drop_column("route_reason")
    with op.batch_alter_table("tenant_quota") as quota:
        quota.drop_column("routing_policy")
