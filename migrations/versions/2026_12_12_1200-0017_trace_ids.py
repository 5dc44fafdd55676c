"""trace ids: a usage row keeps its request's OpenTelemetry trace id, for its receipt

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-12 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("inference_requests") as requests:
        requests.add_column(sa.Column("trace_id", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("inference_requests") as requests:
        requests.drop_column("trace_id")
