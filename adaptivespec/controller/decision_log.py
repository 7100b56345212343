"""The policy version and the history of decision changes, kept until the store takes them."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from adaptivespec.controller.arms import Arm


@dataclass(frozen=True, slots=True)
class DecisionChange:
    ctx_bucket: int  # -1 for changes that are not one cell's
    batch_bucket: int
    old_k: int
    new_k: int
    reason: str
    version: int
    at: float
    old_method: str = ""  # the drafters of old_k and new_k ("" at K = 0)
    new_method: str = ""


class DecisionLog:
    """Bumps the version on every decision change and operator action, and keeps each as a
    history entry until a save takes it (at most `limit`, oldest dropped first)."""

    def __init__(self, limit: int) -> None:
        self.version = 0
        self._entries: deque[DecisionChange] = deque(maxlen=limit)

    def __iter__(self) -> Iterator[DecisionChange]:
        """The unsaved entries, oldest first."""
        return iter(self._entries)

    def learned(self, key: tuple[int, int], old: Arm, new: Arm) -> None:
        """A cell's decision changed."""
        self.version += 1
        self._entries.append(
            DecisionChange(
                key[0], key[1], old.k, new.k, "learned", self.version, time.time(), old.method, new.method
            )
        )

    def event(self, reason: str) -> None:
        """An operator action: a new version and an entry that is not one cell's."""
        self.version += 1
        self._entries.append(DecisionChange(-1, -1, -1, -1, reason, self.version, time.time()))

    def take(self) -> tuple[DecisionChange, ...]:
        """Every unsaved entry; they count as saved until `give_back`."""
        taken = tuple(self._entries)
        self._entries.clear()
        return taken

    def give_back(self, entries: tuple[DecisionChange, ...]) -> None:
        """After a failed save: those entries are unsaved again, before any added since."""
        newer = tuple(self._entries)
        self._entries.clear()
        self._entries.extend(entries)
        self._entries.extend(newer)

    def restore(self, version: int) -> None:
        """Continues from a saved version: versions never go back across restarts."""
        self.version = version
