"""The learned step cost: seconds per step for each K, measured per cell, extended to unmeasured K.

Within a cell the step time is close to linear in K (K draft forwards plus K more verified
tokens per row). Measured arms are used as they are; an unmeasured arm is priced from a
line through the cell's measured arms, or, with a single measurement, from the relative
slope (seconds per extra draft token over the K=0 cost) learned in neighbouring cells.
"""

from __future__ import annotations

from collections.abc import Mapping

from adaptivespec.controller.stats import EWStat

DEFAULT_RELATIVE_SLOPE = 0.15  # before any cell has measured two arms


def relative_slope(times: Mapping[int, EWStat]) -> float | None:
    """Least-squares slope / intercept of step time against K, from arms measured in one cell."""
    points = [(k, s.mean) for k, s in times.items() if s.count]
    if len(points) < 2:
        return None
    n = len(points)
    mean_k = sum(k for k, _ in points) / n
    mean_t = sum(t for _, t in points) / n
    spread = sum((k - mean_k) ** 2 for k, _ in points)
    slope = sum((k - mean_k) * (t - mean_t) for k, t in points) / spread
    intercept = mean_t - slope * mean_k
    if intercept <= 0:
        return None
    return max(slope / intercept, 0.0)


def predict_seconds(times: Mapping[int, EWStat], k: int, slope: float) -> float | None:
    """Step seconds at K for a cell: measured, or extrapolated with a relative slope."""
    stat = times.get(k)
    if stat is not None and stat.count:
        return stat.mean
    measured = [(arm, s.mean) for arm, s in times.items() if s.count]
    if not measured:
        return None
    arm, seconds = min(measured, key=lambda item: abs(item[0] - k))  # the nearest measured arm
    base = seconds / (1.0 + slope * arm)
    return base * (1.0 + slope * k)
