"""Where `train-draft` keeps the EAGLE-3 head it built for a target: keyed by the target's content.

The key is a digest of the target's config and weight files: their names and sizes, and
their first and last MiB. That tells two checkpoints apart as a full hash would (a retrained
or requantized model changes its bytes everywhere), yet costs milliseconds for a model of
any size, so `serve` can look a head up at every start.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from adaptivespec.engine.model_cache import cache_dir

_EDGE = 2**20
_WEIGHTS = ("*.safetensors", "*.bin", "*.gguf")


def fingerprint(model_dir: str | Path) -> str:
    root = Path(model_dir)
    digest = hashlib.sha256()
    files = [root / "config.json"] + sorted(f for pattern in _WEIGHTS for f in root.glob(pattern))
    for file in files:
        if not file.is_file():
            continue
        size = file.stat().st_size
        digest.update(f"{file.name}:{size}".encode())
        with open(file, "rb") as handle:
            digest.update(handle.read(_EDGE))
            if size > 2 * _EDGE:
                handle.seek(size - _EDGE)
                digest.update(handle.read(_EDGE))
    return digest.hexdigest()[:16]


def head_home(model_dir: str | Path, root: Path | None = None) -> Path:
    """The directory the target's trained head lives in (whether or not it exists yet)."""
    return (root or cache_dir()) / "eagle3" / fingerprint(model_dir)


def cached_head(model_dir: str | Path, root: Path | None = None) -> Path | None:
    home = head_home(model_dir, root)
    return home if (home / "config.json").is_file() else None
