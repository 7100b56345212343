"""How much slower a machine's slow steps are than its typical ones: its stall tail.

Every step whose arm already has a robust step time (`RobustStat`) gives a ratio: its seconds
over that typical time. On a quiet machine the ratios stay within a few percent of 1; on a
shared one, a step that lost its core to another process takes several times as long. The
tail is the 90th percentile of the recent ratios, less 1: what a single measurement may be
inflated by. Cells use it to widen the bounds of arms measured only a few times.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW = 256  # recent steps, over every cell
MIN_RATIOS = 16  # fewer: the prior below
PRIOR_TAIL = 0.25  # before the machine is measured: a stalled step is not ruled out
QUANTILE = 0.9


@dataclass(slots=True)
class StallTail:
    _ratios: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    _tail: float = PRIOR_TAIL
    _since: int = 0  # ratios added since the tail was last worked out

    def observe(self, seconds: float, typical: float) -> None:
        if typical > 0:
            self._ratios.append(seconds / typical)
            self._since += 1

    @property
    def tail(self) -> float:
        if len(self._ratios) < MIN_RATIOS:
            return PRIOR_TAIL
        if self._since >= MIN_RATIOS:  # sorting on every step would cost more than it tells
            ordered = sorted(self._ratios)
            self._tail = max(ordered[int(QUANTILE * (len(ordered) - 1))] - 1.0, 0.0)
            self._since = 0
        return self._tail
