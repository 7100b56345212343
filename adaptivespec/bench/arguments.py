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


def _at_least(low: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        value = int(text)
        if value < low:
            raise ValueError(text)
        return value

    return convert


integers = comma_separated(int, "integers")
# Batch sizes, contexts and a drafter's K: zero or less would run nothing, or run "off".
positive_integers = comma_separated(_at_least(1), "integers >= 1")
# K swept over with off among them (0 is a plain step).
draft_lengths = comma_separated(_at_least(0), "integers >= 0")
numbers = comma_separated(float, "numbers")


def positive_integer(text: str) -> int:
    """One integer >= 1, for a flag that takes one."""
    try:
        return _at_least(1)(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from exc
