"""A damaged store is refused at start with a message that names the file and what to do;
never a traceback, never served."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from adaptivespec.cli import main
from adaptivespec.errors import AdaptiveSpecError
from adaptivespec.store.integrity import StoreDamagedError, sqlite_problems
from adaptivespec.store.repository import Store


def _store_file(tmp_path: Path) -> tuple[Path, str]:
    """A migrated store with enough rows that its pages fill some hundreds of kilobytes."""
    path = tmp_path / "state.db"
    url = f"sqlite:///{path}"
    Store(url).close()
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA journal_mode=DELETE")  # everything in the main file
        connection.execute("CREATE TABLE filler (id INTEGER PRIMARY KEY, body BLOB)")
        connection.executemany("INSERT INTO filler (body) VALUES (?)", [(bytes(1000),) for _ in range(400)])
    return path, url


def _garble(path: Path, offset: int, size: int, seed: int = 0) -> None:
    noise = random.Random(seed).randbytes(size)
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(noise)


def test_garbage_in_the_middle_is_refused_with_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, url = _store_file(tmp_path)
    assert sqlite_problems(path) == []
    assert main(["db", "check", "--db", url]) == 0
    assert "ok" in capsys.readouterr().out
    _garble(path, path.stat().st_size // 2, 8192)
    before = path.read_bytes()
    with pytest.raises(StoreDamagedError) as refused:
        Store(url)
    message = str(refused.value)
    assert str(path) in message and "adaptivespec db check" in message and "move it aside" in message
    assert path.read_bytes() == before  # nothing was written to it
    assert main(["db", "check", "--db", url]) == 2
    captured = capsys.readouterr()
    assert captured.out.strip() and "damaged" in captured.err


@pytest.mark.parametrize("damage", ["header", "truncated", "text"])
def test_every_kind_of_damage_is_an_error_not_a_traceback(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, url = _store_file(tmp_path)
    if damage == "header":
        _garble(path, 0, 100)
    elif damage == "truncated":
        with open(path, "r+b") as handle:
            handle.truncate(path.stat().st_size // 3)
    else:
        path.write_text("not a database at all\n" * 100)
    with pytest.raises(AdaptiveSpecError, match="adaptivespec db check"):
        Store(url)
    assert main(["thresholds", "--db", url]) == 2
    assert "adaptivespec db check" in capsys.readouterr().err


def test_the_daemon_refuses_a_damaged_store_before_it_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, url = _store_file(tmp_path)
    _garble(path, path.stat().st_size // 2, 8192)
    assert main(["serve", "--backend", "sim", "--db", url, "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "damaged" in err and str(path) in err and "Traceback" not in err
