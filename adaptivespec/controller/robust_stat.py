"""A step time's location and spread over a window of recent steps, robust to a busy machine.

On a shared host step times are heavy-tailed: a step that lost its core to another process
takes several times the usual. One such step moves an exponentially weighted mean by a tenth
of its excess, and the variance by far more, so an arm measured beside a stall looks worse
than it is for the next dozen steps. Nor is the middle of the window safe: on a 2-core host
with one core taken, a third of the steps or more may stall, and an interquartile mean or a
median of a few steps is then often a stalled figure. A stall only ever slows a step, so the
location is the window's lower quartile (an order statistic: it stands while a quarter of the
steps are clean), and the spread is the lower half's, median less first quartile scaled to a
normal standard deviation, so an interval still widens with measured noise. The lower
quartile sits below a quiet machine's mean by a fraction of its jitter, alike for every arm,
so arms compare as their means would. Where stalls scale with the step, the unstalled figure
also ranks arms as their means would; where a stall adds the same seconds to any step (a lost
time slice, as on the 2-core hosts measured), it under-values the arms that keep more tokens a
step and so meet fewer stalls per token (docs/results.md, the controller on a busy machine).

Fields `mean`, `var` and `count` mean what `EWStat`'s do, so the store, the fleet's totals and
the cells read either alike; a restored stat starts from them until its window has samples.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

WINDOW = 24  # steps: about what an exponential mean with fading 0.1 remembers (19)
HALF_IQR_TO_SIGMA = 0.6745  # median - first quartile of a normal distribution, in standard deviations
MIN_ROBUST = 4  # fewer samples than this: their smallest and plain variance


@dataclass(slots=True)
class RobustStat:
    window: int = WINDOW
    mean: float = 0.0  # lower quartile of the window (or what was restored)
    var: float = 0.0  # ((median - lower quartile) / 0.6745)^2 of the window (or what was restored)
    count: int = 0  # every sample ever, restored ones included
    _recent: deque[float] = field(default_factory=deque)
    _restored: bool = False  # mean and var came from the store: they stand until the window can

    def __post_init__(self) -> None:
        if self.window < MIN_ROBUST:
            raise ValueError(f"window must be >= {MIN_ROBUST}, got {self.window}")

    @classmethod
    def restored(cls, mean: float, var: float, count: int, window: int = WINDOW) -> RobustStat:
        return cls(window, mean, var, count, _restored=count > 0)

    def update(self, x: float, recent: Sequence[float] | None = None) -> None:
        """One more sample, `x`; `recent`: the window read again with it, oldest first (the
        same steps, each priced anew, `x`'s own figure last), instead of `x` appended."""
        self.count += 1
        if recent is None:
            self._recent.append(x)
            if len(self._recent) > self.window:
                self._recent.popleft()
        else:
            self._recent = deque(recent[-self.window :])
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
        # Too few for quartiles: the smallest, since a stall only ever slows a step; the spread
        # is the plain one, so that a stall still widens the interval.
        mean = sum(ordered) / n
        return ordered[0], sum((x - mean) ** 2 for x in ordered) / max(n - 1, 1)
    q1, median = ordered[(n - 1) // 4], ordered[(n - 1) // 2]
    return q1, ((median - q1) / HALF_IQR_TO_SIGMA) ** 2
