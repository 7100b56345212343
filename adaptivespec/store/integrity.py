"""Whether a SQLite store is sound before anything reads or writes it.

A damaged file must never be served silently: decisions read from it may be garbage, and
writes into it may spread the damage. So the daemon runs `PRAGMA quick_check` at start and
refuses a file that fails it, naming the file and what to do; `adaptivespec db check` runs
the same check (or the full `integrity_check`) on demand. PostgreSQL checks its own pages.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from adaptivespec.errors import AdaptiveSpecError

SHOWN_PROBLEMS = 5  # problems quoted in an error; `db check` prints all of them


class StoreDamagedError(AdaptiveSpecError):
    """The store's file is damaged: it must be checked, moved aside or restored first."""


def sqlite_problems(path: Path, full: bool = False) -> list[str]:
    """What SQLite finds wrong with the file (quick_check, or integrity_check when `full`);
    [] when it is sound. Opens the file read-only, so checking never changes it."""
    pragma = "integrity_check" if full else "quick_check"
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return [f"cannot open the file: {exc}"]
    try:
        rows = connection.execute(f"PRAGMA {pragma}").fetchall()
    except sqlite3.DatabaseError as exc:  # "file is not a database", "database disk image is malformed"
        return [str(exc)]
    finally:
        connection.close()
    return [str(row[0]) for row in rows if row[0] != "ok"]


def damaged(path: Path, problems: list[str], url: str) -> StoreDamagedError:
    """The error for a damaged file: what is wrong, and the three ways on."""
    shown = "; ".join(problems[:SHOWN_PROBLEMS])
    more = f" (and {len(problems) - SHOWN_PROBLEMS} more)" if len(problems) > SHOWN_PROBLEMS else ""
    return StoreDamagedError(
        f"the store {path} is damaged: {shown}{more}. Nothing was read from it or written to it. "
        f"See every problem with `adaptivespec db check --db {url}`; then either restore the file "
        f"from a backup, or move it aside (`mv {path} {path}.damaged`, with its -wal and -shm "
        "files if present) so that the daemon starts on a new, empty store and learns again"
    )


def check_sqlite(path: Path, url: str) -> None:
    """Raises StoreDamagedError when the file exists and fails quick_check."""
    if not path.is_file():
        return
    problems = sqlite_problems(path)
    if problems:
        raise damaged(path, problems, url)
