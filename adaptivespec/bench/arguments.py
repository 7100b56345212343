"""Argument types that the bench subcommands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def comma_separated(convert: Callable[[str], T], what: str) -> Callable[[str], list[T]]:
    def parse(text: str) -> list[T]:
        try:
            return [convert(x) for x in text.split(",") if x]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from exc

    return parse


integers = comma_separated(int, "integers")
numbers = comma_separated(float, "numbers")
