"""Database engines and migrations. SQLite by default; any SQLAlchemy URL works (PostgreSQL for fleets).

A plain `postgresql://` URL uses psycopg (version 3, a dependency); PostgreSQL connections
time out instead of hanging a flush when the server is gone, and are pinged before reuse, so a
restarted server is picked up without restarting the daemon.

SQLite runs in WAL mode with a busy timeout, so readers (the thresholds command, the admin
API) never block the writer. synchronous=NORMAL is deliberate: in WAL mode it survives an
application crash with every committed transaction intact; only a power loss can drop the
last commits, and those are learning statistics that re-accumulate within seconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url

from adaptivespec.errors import AdaptiveSpecError
from adaptivespec.store.integrity import check_sqlite

CONNECT_TIMEOUT_SECONDS = 5
STATEMENT_TIMEOUT_MS = 15_000
SQLITE_BUSY_MS = 5000
MIGRATION_LOCK = 0x61647370  # pg_advisory_xact_lock key ("adsp"): one host migrates at a time


class StoreError(AdaptiveSpecError):
    """The database cannot be used as it is (wrong schema, unreachable)."""


def state_dir() -> Path:
    explicit = os.environ.get("ADAPTIVESPEC_STATE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "adaptivespec"


def default_url() -> str:
    return f"sqlite:///{state_dir() / 'adaptivespec.db'}"


def make_engine(url: str | None = None, create: bool = True) -> Engine:
    """An engine for `url`; with `create=False` a SQLite file that does not exist is an error."""
    parsed = _with_driver(make_url(url or default_url()))
    if parsed.get_backend_name() == "postgresql":
        return create_engine(
            parsed,
            pool_pre_ping=True,
            connect_args={
                "connect_timeout": CONNECT_TIMEOUT_SECONDS,
                "options": f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
            },
        )
    path = _sqlite_path(parsed)
    if path is not None:
        if not create and not path.is_file():
            raise StoreError(f"no database at {path}; point --db at the daemon's database")
        check_sqlite(path, parsed.render_as_string())  # before any connection writes to it
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(parsed)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _with_driver(url: URL) -> URL:
    """`postgresql://` and `postgres://` mean psycopg 3, the driver adaptivespec depends on."""
    if url.drivername in ("postgresql", "postgres"):
        return url.set(drivername="postgresql+psycopg")
    return url


def sqlite_path(url: str | None) -> Path | None:
    """The file behind a SQLite URL (None for another database, or one in memory)."""
    return _sqlite_path(_with_driver(make_url(url or default_url())))


def _sqlite_path(url: URL) -> Path | None:
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def _sqlite_pragmas(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
    _switch_to_wal(cursor)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _switch_to_wal(cursor: Any) -> None:
    """SQLite answers "database is locked" at once, without its busy handler, when daemons
    starting together switch a new file to WAL at the same moment: so this waits and retries."""
    deadline = time.monotonic() + SQLITE_BUSY_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def migrations_dir() -> Path:
    """Alembic's folder: ADAPTIVESPEC_MIGRATIONS, else the one an installed wheel carries
    (adaptivespec/migrations), else the source tree's top-level migrations/."""
    explicit = os.environ.get("ADAPTIVESPEC_MIGRATIONS")
    package = Path(__file__).resolve().parents[1]
    candidates = [Path(explicit)] if explicit else [package / "migrations", package.parent / "migrations"]
    for candidate in candidates:
        if (candidate / "env.py").is_file():
            return candidate
    raise StoreError(
        f"Alembic migrations not found at {' or '.join(map(str, candidates))}; reinstall adaptivespec "
        "(its wheel carries them), or point ADAPTIVESPEC_MIGRATIONS at its migrations/ folder"
    )


def _alembic_config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    url = engine.url.render_as_string(hide_password=False)
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # ConfigParser interpolates %
    return config


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> str | None:
    """Runs the migrations up to `revision`; refuses a database written by a newer adaptivespec."""
    config = _alembic_config(engine)
    scripts = ScriptDirectory.from_config(config)
    current = current_revision(engine)
    if current is not None and not _known(scripts, current):
        raise StoreError(
            f"the database at {engine.url.render_as_string()} has schema revision {current!r}, which this "
            f"adaptivespec does not know (it knows up to {scripts.get_current_head()!r}); "
            "upgrade adaptivespec, or point --db at another database"
        )
    with _migration_lock(engine), engine.begin() as connection:
        _lock_postgresql(connection)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    return current_revision(engine)


@contextlib.contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    """Two daemons starting at once on one SQLite file take turns (a lock file beside it)."""
    path = _sqlite_path(engine.url)
    if path is None:
        yield
        return
    with open(path.with_name(path.name + ".migrate-lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lock_postgresql(connection: Connection) -> None:
    """Hosts starting at once on one PostgreSQL take turns: the lock ends with the transaction,
    and the next host then finds the schema current."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})


def require_current(engine: Engine) -> None:
    """Refuses a database whose schema is not this adaptivespec's, without changing it."""
    head = ScriptDirectory.from_config(_alembic_config(engine)).get_current_head()
    current = current_revision(engine)
    where = engine.url.render_as_string()
    if current is None:
        raise StoreError(
            f"the database at {where} has no adaptivespec schema; start the daemon on it, "
            f"or run `adaptivespec db upgrade --db {where}`"
        )
    if current != head:
        raise StoreError(
            f"the database at {where} is at schema revision {current!r}, not {head!r}; "
            f"run `adaptivespec db upgrade --db {where}` (or use the adaptivespec that wrote it)"
        )


def _known(scripts: ScriptDirectory, revision: str) -> bool:
    try:
        return scripts.get_revision(revision) is not None
    except Exception:
        return False
