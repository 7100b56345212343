"""How often a host of a fleet flushes its totals and reads the others': fast while it learns.

A lone host learns a cell in tens of steps, well under a second at GPU step times; a flush
every 2 s and a refresh every 5 s arrive after that, so hosts that meet a new cell together
would each pay the whole exploration. So the host looks every `young_seconds` at the cells it
stepped since its last flush, and while one of them has fewer than `young_steps` steps across
the fleet, it flushes and refreshes at that pace, sharing the exploration as it happens. The
load this adds ends by itself: evidence is counted over the whole fleet, so the more hosts
there are, the sooner every cell is past `young_steps`. The default pace, 10 ms, is under one
GPU decode step: hosts that start a cell together then see each other's probes a step or
two later (docs/results.md has what a slower pace cost).
"""

from __future__ import annotations

from dataclasses import dataclass

from adaptivespec.errors import ConfigError


@dataclass(frozen=True, slots=True)
class SyncDue:
    """What one look at the cadence decided."""

    learning: bool  # a cell stepped since the last flush is young
    flush: bool
    refresh: bool


@dataclass(frozen=True, slots=True)
class SyncCadence:
    flush_seconds: float = 2.0  # a host whose cells have evidence flushes this often ...
    refresh_seconds: float = 5.0  # ... and reads the fleet's view this often
    young_seconds: float = 0.01  # both, while a cell it serves is young; and how often it looks
    young_steps: int = 200  # a cell is young until the fleet has this many steps in it

    def __post_init__(self) -> None:
        for name in ("flush_seconds", "refresh_seconds", "young_seconds"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.young_steps < 0:
            raise ConfigError(f"young_steps must be >= 0 (0 turns fast syncing off), got {self.young_steps}")

    @property
    def tick_seconds(self) -> float:
        """How often the host checks whether a flush or a refresh is due."""
        return min(self.young_seconds, self.flush_seconds)

    @property
    def live_seconds(self) -> float:
        """A host that has not flushed for this long (three steady flushes) is not counted live."""
        return 3 * self.flush_seconds

    def intervals(self, learning: bool) -> tuple[float, float]:
        """(seconds between flushes, seconds between refreshes)."""
        if learning:
            return min(self.young_seconds, self.flush_seconds), min(self.young_seconds, self.refresh_seconds)
        return self.flush_seconds, self.refresh_seconds

    def due(
        self, learning: bool, now: float, last_flush: float | None, last_refresh: float | None
    ) -> SyncDue:
        """One look, at time `now` (the daemon's wall clock, or a benchmark host's virtual one);
        `learning`: a cell the host stepped since its last flush is young
        (`Controller.stepping_young_cells`)."""
        flush_every, refresh_every = self.intervals(learning)
        return SyncDue(
            learning, _elapsed(last_flush, now, flush_every), _elapsed(last_refresh, now, refresh_every)
        )


def _elapsed(last: float | None, now: float, every: float) -> bool:
    return last is None or now - last >= every
