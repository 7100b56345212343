"""Bandit and cost-model statistics, so learning resumes after a restart.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("reward_scale", sa.Float(), server_default="0", nullable=False))
    op.create_table(
        "arm_stats",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("model_key", sa.String(256), nullable=False),
        sa.Column("hardware_key", sa.String(256), nullable=False),
        sa.Column("ctx_bucket", sa.Integer(), nullable=False),
        sa.Column("batch_bucket", sa.Integer(), nullable=False),
        sa.Column("k", sa.Integer(), nullable=False),
        sa.Column("reward_mean", sa.Float(), nullable=False),
        sa.Column("reward_var", sa.Float(), nullable=False),
        sa.Column("reward_count", sa.Integer(), nullable=False),
        sa.Column("seconds_mean", sa.Float(), nullable=False),
        sa.Column("seconds_var", sa.Float(), nullable=False),
        sa.Column("seconds_count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_arm_stats"),
        sa.UniqueConstraint(
            "model_key", "hardware_key", "ctx_bucket", "batch_bucket", "k", name="uq_arm_stats_model_key"
        ),
    )
    op.create_index("ix_arm_stats_model_key", "arm_stats", ["model_key"])
    op.create_index("ix_arm_stats_hardware_key", "arm_stats", ["hardware_key"])
    op.create_table(
        "acceptance_stats",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("model_key", sa.String(256), nullable=False),
        sa.Column("hardware_key", sa.String(256), nullable=False),
        sa.Column("ctx_bucket", sa.Integer(), nullable=False),
        sa.Column("mean", sa.Float(), nullable=False),
        sa.Column("var", sa.Float(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_acceptance_stats"),
        sa.UniqueConstraint("model_key", "hardware_key", "ctx_bucket", name="uq_acceptance_stats_model_key"),
    )
    op.create_index("ix_acceptance_stats_model_key", "acceptance_stats", ["model_key"])
    op.create_index("ix_acceptance_stats_hardware_key", "acceptance_stats", ["hardware_key"])


def downgrade() -> None:
    op.drop_table("acceptance_stats")
    op.drop_table("arm_stats")
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("reward_scale")
