"""A step time's location and spread over a window of recent steps, robust to a busy machine.

On a shared host step times are heavy-tailed: a step that lost its core to another process
takes several times the usual. One such step moves an exponentially weighted mean by a tenth
of its excess, and the variance by far more, so an arm measured beside a stall looks worse
than it is for the next dozen steps. The interquartile mean (the mean of the middle half) of
the last `window` steps ignores the tails on both sides; the interquartile range, scaled to a
normal standard deviation, is the spread, so an interval still widens with measured noise.

Fields `mean`, `var` and `count` mean what `EWStat`'s do, so the store, the fleet's totals and
the cells read either alike; a restored stat starts from them until its window has samples.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW = 24  # steps: about what an exponential mean with fading 0.1 remembers (19)
IQR_TO_SIGMA = 1.349  # interquartile range of a normal distribution, in standard deviations
MIN_ROBUST = 4  # fewer samples than this: their lower median and plain variance


@dataclass(slots=True)
class RobustStat:
    window: int = WINDOW
    mean: float = 0.0  # interquartile mean of the window (or what was restored)
    var: float = 0.0  # (IQR / 1.349)^2 of the window (or what was restored)
    count: int = 0  # every sample ever, restored ones included
    _recent: deque[float] = field(default_factory=deque)
    _restored: bool = False  # mean and var came from the store: they stand until the window can

    def __post_init__(self) -> None:
        if self.window < MIN_ROBUST:
            raise ValueError(f"window must be >= {MIN_ROBUST}, got {self.window}")

    @classmethod
    def restored(cls, mean: float, var: float, count: int, window: int = WINDOW) -> RobustStat:
        return cls(window, mean, var, count, _restored=count > 0)

    def update(self, x: float) -> None:
        self.count += 1
        self._recent.append(x)
        if len(self._recent) > self.window:
            self._recent.popleft()
        if self._restored and len(self._recent) < MIN_ROBUST:
            return  # a few new steps do not outweigh what was restored
        self._restored = False
        self.mean, self.var = _location_and_spread(sorted(self._recent))

    @property
    def samples(self) -> int:
        """How many samples the location stands on: the window's, or the restored count."""
        return self.count if self._restored else len(self._recent)


def _location_and_spread(ordered: list[float]) -> tuple[float, float]:
    n = len(ordered)
    if n < MIN_ROBUST:
        # Too few for quartiles: the lower median (the smaller of two), since a stall only ever
        # slows a step; the spread is the plain one, so that a stall still widens the interval.
        mean = sum(ordered) / n
        return ordered[(n - 1) // 2], sum((x - mean) ** 2 for x in ordered) / max(n - 1, 1)
    lo, hi = n // 4, n - n // 4
    middle = ordered[lo:hi]
    q1, q3 = _quantile(ordered, 0.25), _quantile(ordered, 0.75)
    return sum(middle) / len(middle), ((q3 - q1) / IQR_TO_SIGMA) ** 2


def _quantile(ordered: list[float], q: float) -> float:
    position = q * (len(ordered) - 1)
    below = int(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (position - below) * (ordered[above] - ordered[below])
