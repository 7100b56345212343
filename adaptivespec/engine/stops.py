"""Stop strings: where the first one starts, and how much trailing text may still become one."""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self._longest = max((len(s) for s in stops), default=0)

    def __bool__(self) -> bool:
        return bool(self.stops)

    def find(self, text: str, checked: int) -> int | None:
        """Start of the earliest stop string in `text` that was not inside `text[:checked]` already."""
        start = max(0, checked - self._longest + 1)
        hits = [i for i in (text.find(s, start) for s in self.stops) if i >= 0]
        return min(hits) if hits else None

    def held_back(self, text: str) -> int:
        """Characters at the end of `text` that are a proper prefix of some stop string."""
        for size in range(min(self._longest - 1, len(text)), 0, -1):
            tail = text[-size:]
            if any(s.startswith(tail) for s in self.stops):
                return size
        return 0
