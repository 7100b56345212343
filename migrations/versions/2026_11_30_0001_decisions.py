"""Decisions, their history, overrides and per-key policy state.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _keys() -> list[sa.Column]:
    return [
        sa.Column("model_key", sa.String(256), nullable=False),
        sa.Column("hardware_key", sa.String(256), nullable=False),
    ]


def _index_keys(table: str) -> None:
    op.create_index(f"ix_{table}_model_key", table, ["model_key"])
    op.create_index(f"ix_{table}_hardware_key", table, ["hardware_key"])


def upgrade() -> None:
    op.create_table(
        "policy_state",
        sa.Column("id", sa.Integer(), primary_key=True),
        *_keys(),
        sa.Column("version", sa.Integer(), server_default="0", nullable=False),
        sa.Column("frozen", sa.Integer(), server_default="0", nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_policy_state"),
        sa.UniqueConstraint("model_key", "hardware_key", name="uq_policy_state_model_key"),
    )
    _index_keys("policy_state")
    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), primary_key=True),
        *_keys(),
        sa.Column("ctx_bucket", sa.Integer(), nullable=False),
        sa.Column("batch_bucket", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("samples", sa.Integer(), server_default="0", nullable=False),
        sa.Column("confidence", sa.Float(), server_default="0", nullable=False),
        sa.Column("policy_version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_decisions"),
        sa.UniqueConstraint(
            "model_key", "hardware_key", "ctx_bucket", "batch_bucket", name="uq_decisions_model_key"
        ),
    )
    _index_keys("decisions")
    op.create_table(
        "decision_history",
        sa.Column("id", sa.Integer(), primary_key=True),
        *_keys(),
        sa.Column("ctx_bucket", sa.Integer(), nullable=False),
        sa.Column("batch_bucket", sa.Integer(), nullable=False),
        sa.Column("old_k", sa.Integer(), nullable=False),
        sa.Column("new_k", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(512), nullable=False),
        sa.Column("policy_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_decision_history"),
    )
    _index_keys("decision_history")
    op.create_index("ix_decision_history_policy_version", "decision_history", ["policy_version"])
    op.create_table(
        "overrides",
        sa.Column("id", sa.Integer(), primary_key=True),
        *_keys(),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("k", sa.Integer(), nullable=True),
        sa.Column("ctx_bucket", sa.Integer(), nullable=True),
        sa.Column("batch_bucket", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_overrides"),
    )
    _index_keys("overrides")


def downgrade() -> None:
    for table in ("overrides", "decision_history", "decisions", "policy_state"):
        op.drop_table(table)
