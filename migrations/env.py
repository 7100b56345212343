"""Alembic environment: the metadata comes from adaptivespec.store.models."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from adaptivespec.store.models import Base

config = context.config
target_metadata = Base.metadata


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    connectable = engine_from_config(
        config.get_section(config.config_ini_section) or {}, poolclass=pool.NullPool
    )
    with connectable.connect() as connection:
        _run(connection)


def _run(connection: object) -> None:
    # render_as_batch: SQLite cannot ALTER most things in place; batch mode copies the table.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
