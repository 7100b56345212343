"""Fleet pooling: each host's cumulative totals, in rows only that host writes, and their sums.

The sums (`fleet_pooled_*`) change in the same transaction as the host rows they sum, so
they always equal the GROUP BY of those rows; a refresh reads them instead of running it.

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


def _keyed(table: str, *columns: sa.Column, unique: tuple[str, ...], per_host: bool = True) -> None:
    key = _KEY if per_host else _KEY[1:]
    op.create_table(
        table,
        sa.Column("id", sa.Integer(), primary_key=True),
        *(sa.Column(name, sa.String(256), nullable=False) for name in key),
        *columns,
        sa.PrimaryKeyConstraint("id", name=f"pk_{table}"),
        sa.UniqueConstraint(*key, *unique, name=f"uq_{table}_{key[0]}"),
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
    _keyed("fleet_arm_totals", *_arm_columns(), unique=("ctx_bucket", "batch_bucket", "k"))
    _keyed("fleet_acceptance_totals", *_acceptance_columns(), unique=("ctx_bucket", "position"))
    _keyed(
        "fleet_pooled_arms",
        *_arm_columns(),
        sa.Column("hosts", sa.Integer(), nullable=False),
        unique=("ctx_bucket", "batch_bucket", "k"),
        per_host=False,
    )
    _keyed(
        "fleet_pooled_acceptance", *_acceptance_columns(), unique=("ctx_bucket", "position"), per_host=False
    )


def _arm_columns() -> tuple[sa.Column, ...]:
    return (
        sa.Column("ctx_bucket", sa.Integer(), nullable=False),
        sa.Column("batch_bucket", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("steps", sa.BigInteger(), nullable=False),
        sa.Column("reward_sum", sa.Float(), nullable=False),
        sa.Column("reward_sq", sa.Float(), nullable=False),
        sa.Column("seconds_sum", sa.Float(), nullable=False),
        sa.Column("seconds_sq", sa.Float(), nullable=False),
    )


def _acceptance_columns() -> tuple[sa.Column, ...]:
    return (
        sa.Column("ctx_bucket", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("kept", sa.BigInteger(), nullable=False),
        sa.Column("at_risk", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    tables = ("fleet_pooled_acceptance", "fleet_pooled_arms", "fleet_acceptance_totals", "fleet_arm_totals")
    for table in (*tables, "fleet_hosts"):
        op.drop_table(table)
