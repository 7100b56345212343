"""How much slower a machine's slow steps are than its typical ones: its stall tail.

Every step whose arm already has a robust step time (`RobustStat`) gives a ratio: its seconds
over that typical time. On a quiet machine the ratios stay within a few percent of 1; on a
shared one, a step that lost its core to another process takes several times as long. The
tail is the 90th percentile of the recent ratios, less 1: what a single measurement may be
inflated by. Cells use it to widen the bounds of arms measured only a few times.

The same ratios give the machine's *level*: the median of the last few, how a step taken now
compares with a robust figure. A robust figure is a lower quartile over many steps, and a
single step is not: on a shared machine one step reads above it even when nothing stalled, and
more so while the machine is busy (consecutive steps' ratios are correlated). An arm probed
once is priced by its step over the level (`RobustStat`), so that it is compared with the held
arm's lower quartile like with like, not a single step against the best quarter of many.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW = 256  # recent steps, over every cell
MIN_RATIOS = 16  # fewer: the prior below
PRIOR_TAIL = 0.25  # before the machine is measured: a stalled step is not ruled out
QUANTILE = 0.9
LEVEL_WINDOW = 8  # the last steps the level is the median of: recent enough to follow a busy spell
MIN_LEVEL = 3  # fewer ratios: level 1, a single step taken at its word


@dataclass(slots=True)
class StallTail:
    _ratios: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    _recent: deque[float] = field(default_factory=lambda: deque(maxlen=LEVEL_WINDOW))
    _tail: float = PRIOR_TAIL
    _since: int = 0  # ratios added since the tail was last worked out

    def observe(self, seconds: float, typical: float) -> None:
        if typical > 0:
            self._ratios.append(seconds / typical)
            self._recent.append(seconds / typical)
            self._since += 1

    @property
    def level(self) -> float:
        """How a step now compares with a robust step time: the median of the last ratios."""
        if len(self._recent) < MIN_LEVEL:
            return 1.0
        ordered = sorted(self._recent)
        middle = len(ordered) // 2
        return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2

    @property
    def tail(self) -> float:
        if len(self._ratios) < MIN_RATIOS:
            return PRIOR_TAIL
        if self._since >= MIN_RATIOS:  # sorting on every step would cost more than it tells
            ordered = sorted(self._ratios)
            self._tail = max(ordered[int(QUANTILE * (len(ordered) - 1))] - 1.0, 0.0)
            self._since = 0
        return self._tail
