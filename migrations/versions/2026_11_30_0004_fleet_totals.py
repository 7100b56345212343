"""Fleet pooling: each host's cumulative totals, in rows only that host writes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_KEY = ("host_id", "model_key", "hardware_key")


def _keyed(table: str, *columns: sa.Column, unique: tuple[str, ...]) -> None:
    op.create_table(
        table,
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("host_id", sa.String(256), nullable=False),
        sa.Column("model_key", sa.String(256), nullable=False),
        sa.Column("hardware_key", sa.String(256), nullable=False),
        *columns,
        sa.PrimaryKeyConstraint("id", name=f"pk_{table}"),
        sa.UniqueConstraint(*_KEY, *unique, name=f"uq_{table}_host_id"),
    )
    op.create_index(f"ix_{table}_model_key", table, ["model_key"])
    op.create_index(f"ix_{table}_hardware_key", table, ["hardware_key"])


def upgrade() -> None:
    _keyed(
        "fleet_hosts",
        sa.Column("steps", sa.BigInteger(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_flush_at", sa.DateTime(timezone=True), nullable=False),
        unique=(),
    )
    _keyed(
        "fleet_arm_totals",
        sa.Column("ctx_bucket", sa.Integer(), nullable=False),
        sa.Column("batch_bucket", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("steps", sa.BigInteger(), nullable=False),
        sa.Column("reward_sum", sa.Float(), nullable=False),
        sa.Column("reward_sq", sa.Float(), nullable=False),
        sa.Column("seconds_sum", sa.Float(), nullable=False),
        sa.Column("seconds_sq", sa.Float(), nullable=False),
        unique=("ctx_bucket", "batch_bucket", "k"),
    )
    _keyed(
        "fleet_acceptance_totals",
        sa.Column("ctx_bucket", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("kept", sa.BigInteger(), nullable=False),
        sa.Column("at_risk", sa.BigInteger(), nullable=False),
        unique=("ctx_bucket", "position"),
    )


def downgrade() -> None:
    for table in ("fleet_acceptance_totals", "fleet_arm_totals", "fleet_hosts"):
        op.drop_table(table)
