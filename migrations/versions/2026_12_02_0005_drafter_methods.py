"""Arms name their drafter: a cell chooses among (drafter, K), not K alone.

Every row keyed by K gains the drafter (`method`) beside it, and unique keys include it.
Rows saved before this revision have "" there: they are the first drafter's of their model
key (a model key names the drafters its runner loaded), or speculation off at K = 0.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_MODEL = ("model_key", "hardware_key")
_HOST = ("host_id", *_MODEL)
# table -> (its unique key's columns before the K-like column, that column, the key's prefix)
_KEYED = {
    "arm_stats": (("ctx_bucket", "batch_bucket"), "k", _MODEL),
    "acceptance_stats": (("ctx_bucket",), None, _MODEL),
    "fleet_arm_totals": (("ctx_bucket", "batch_bucket"), "k", _HOST),
    "fleet_acceptance_totals": (("ctx_bucket",), "position", _HOST),
    "fleet_pooled_arms": (("ctx_bucket", "batch_bucket"), "k", _MODEL),
    "fleet_pooled_acceptance": (("ctx_bucket",), "position", _MODEL),
}


def _method() -> sa.Column:
    return sa.Column("method", sa.String(64), server_default="", nullable=False)


def _unique(table: str, with_method: bool) -> tuple[str, list[str]]:
    cells, last, prefix = _KEYED[table]
    columns = [*prefix, *cells, *(["method"] if with_method else []), *([last] if last else [])]
    return f"uq_{table}_{prefix[0]}", columns


def upgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(_method())
    with op.batch_alter_table("decision_history") as batch:
        batch.add_column(sa.Column("old_method", sa.String(64), server_default="", nullable=False))
        batch.add_column(sa.Column("new_method", sa.String(64), server_default="", nullable=False))
    with op.batch_alter_table("overrides") as batch:
        batch.add_column(sa.Column("method", sa.String(64), nullable=True))
    for table in _KEYED:
        name, columns = _unique(table, with_method=True)
        with op.batch_alter_table(table) as batch:
            batch.add_column(_method())
            batch.drop_constraint(name, type_="unique")
            batch.create_unique_constraint(name, columns)


def downgrade() -> None:
    for table in _KEYED:
        name, columns = _unique(table, with_method=False)
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(name, type_="unique")
            batch.drop_column("method")
            batch.create_unique_constraint(name, columns)
    with op.batch_alter_table("overrides") as batch:
        batch.drop_column("method")
    with op.batch_alter_table("decision_history") as batch:
        batch.drop_column("new_method")
        batch.drop_column("old_method")
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("method")
