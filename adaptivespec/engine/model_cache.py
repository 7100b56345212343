"""The on-disk cache of models we build or convert: where it lives, and one builder at a time."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path


def cache_dir() -> Path:
    explicit = os.environ.get("ADAPTIVESPEC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "adaptivespec"


def build_once(home: Path, done_marker: str, build: Callable[[Path], None]) -> Path:
    """Returns `home`, building it first into a staging folder unless a finished copy exists.

    A lock file serialises concurrent builders (two daemons starting at once), and the
    staging folder is renamed into place only when complete, so an interrupted build
    never leaves a half-written model behind.
    """
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / done_marker).exists():
            staging = home.with_name(home.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            build(staging)
            shutil.rmtree(home, ignore_errors=True)
            staging.rename(home)
    return home


def announce(progress: bool, message: str) -> None:
    """Progress lines for long first-use work (downloads, conversions, training) go to stderr."""
    if progress:
        print(f"[adaptivespec] {message}", file=sys.stderr, flush=True)
