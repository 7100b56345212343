"""Acceptance as two rates: the first draft's, and the continuation's of later drafts.

Prompt lookup keeps a copied span whole or not at all, so one geometric rate under-prices
long drafts. The old `mean` becomes the first-draft rate; rows saved before this revision
have no continuation and are read as geometric (continuation = first). `var` was never used.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("acceptance_stats") as batch:
        batch.alter_column("mean", new_column_name="first_rate")
        batch.add_column(sa.Column("continuation_rate", sa.Float(), nullable=True))
        batch.drop_column("var")


def downgrade() -> None:
    with op.batch_alter_table("acceptance_stats") as batch:
        batch.add_column(sa.Column("var", sa.Float(), server_default="0", nullable=False))
        batch.drop_column("continuation_rate")
        batch.alter_column("first_rate", new_column_name="mean")
