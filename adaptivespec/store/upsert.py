"""INSERT ... ON CONFLICT DO UPDATE on the table's unique key, for SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, UniqueConstraint
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from adaptivespec.store.db import StoreError
from adaptivespec.store.models import Base


def upsert(
    session: Session,
    table: type[Base],
    rows: list[dict[str, object]],
    keep: Sequence[str] = (),
    add: bool = False,
) -> None:
    """Concurrent writers of one key never collide on the constraint, and the last write of each
    row wins whole, except the columns in `keep`, which the first insert sets for good. With
    `add`, the values are increments: an existing row gets them added to its own."""
    if not rows:
        return
    constraints = cast(Table, table.__table__).constraints
    unique = next(c for c in constraints if isinstance(c, UniqueConstraint))
    key = [column.name for column in unique.columns]
    updated = [name for name in rows[0] if name not in key and name not in keep]
    dialect = session.get_bind().dialect.name
    if dialect == "sqlite":
        statement: Any = sqlite_insert(table).values(rows)
    elif dialect == "postgresql":
        statement = postgresql_insert(table).values(rows)
    else:
        raise StoreError(f"the store supports SQLite and PostgreSQL, not {dialect}")
    columns = cast(Table, table.__table__).c
    new = statement.excluded
    values = {n: columns[n] + new[n] if add else new[n] for n in updated}
    session.execute(statement.on_conflict_do_update(index_elements=key, set_=values))
