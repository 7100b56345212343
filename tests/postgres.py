"""Throwaway PostgreSQL clusters for the tests: `initdb` and `pg_ctl` on a temporary directory.

`.ci/run` starts one cluster for the whole run and exports ADAPTIVESPEC_TEST_POSTGRES_URL; each
test then gets its own database on it. Tests that kill the server start a cluster of their own.
With ADAPTIVESPEC_REQUIRE_POSTGRES=1 (CI) a missing PostgreSQL fails instead of skipping.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

URL_VARIABLE = "ADAPTIVESPEC_TEST_POSTGRES_URL"


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def unavailable(reason: str) -> None:
    if os.environ.get("ADAPTIVESPEC_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL is required here: {reason}")
    pytest.skip(f"{reason}; install the postgresql package to run the fleet tests")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """One PostgreSQL server on 127.0.0.1 with trust authentication, owned by the test run."""

    def __init__(self) -> None:
        initdb, pg_ctl = _binary("initdb"), _binary("pg_ctl")
        if initdb is None or pg_ctl is None:
            unavailable("initdb and pg_ctl were not found")
        self.initdb, self.pg_ctl = str(initdb), str(pg_ctl)
        self.root = Path(tempfile.mkdtemp(prefix="adaptivespec-pg-"))
        self.port = _free_port()
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to the postgres user
            shutil.chown(self.root, user="postgres")
        self._run(self.initdb, "-D", str(self.root / "data"), "-A", "trust", "-U", "postgres")
        self.start()

    def _run(self, *command: str) -> None:
        if os.geteuid() == 0:
            command = ("runuser", "-u", "postgres", "--", *command)
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            self.pg_ctl,
            "-D",
            str(self.root / "data"),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run(self.pg_ctl, "-D", str(self.root / "data"), "-m", mode, "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def remove(self) -> None:
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # already stopped
        shutil.rmtree(self.root, ignore_errors=True)


def create_database(server_url: str) -> tuple[str, str]:
    """A fresh database on the server; returns its URL and name."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    engine = create_engine(
        server_url.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT"
    )
    with engine.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return server_url.rsplit("/", 1)[0] + f"/{name}", name


def drop_database(server_url: str, name: str) -> None:
    engine = create_engine(
        server_url.replace("postgresql://", "postgresql+psycopg://", 1), isolation_level="AUTOCOMMIT"
    )
    with engine.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()
