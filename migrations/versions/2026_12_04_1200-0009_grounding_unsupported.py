"""grounding: the claims of an answer that its media did not support

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("inference_requests") as batch:
        batch.add_column(sa.Column("grounding_unsupported", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("inference_requests") as batch:
        batch.drop_column("grounding_unsupported")
