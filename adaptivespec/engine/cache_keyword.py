"""The keyword a transformers forward takes its KV cache by."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def cache_keyword(forward: Callable[..., Any]) -> str:
    """transformers 5.x renamed `past_key_values` to `cache` (the old name warns, then goes in
    5.40); pass whichever this release's `forward` takes."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"
