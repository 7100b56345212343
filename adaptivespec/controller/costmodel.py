"""The learned step cost: seconds per step for each K, measured per cell, bounded where unmeasured.

Measured arms are used as they are. An unmeasured arm gets an *optimistic* bound from the
shape a decode step has (a roofline: the maximum of linear costs, so non-decreasing and
convex in K): the cost never falls as K grows; beyond the two largest measured arms it keeps
rising at least at half their secant slope (half, because real kernels are not perfectly
convex: on the CPU a 2-token verify can cost more than a 5-token one); and below the
smallest measured arm it shrinks at most with the tokens verified per row (K + 1).
Bounded exploration then rarely skips an arm that could win, and stops trying costly ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from adaptivespec.controller.stats import EWStat

SECANT_FRACTION = 0.5


def measured_seconds(times: Mapping[int, EWStat], k: int) -> float | None:
    stat = times.get(k)
    return stat.mean if stat is not None and stat.count else None


def optimistic_seconds(times: Mapping[int, EWStat], k: int) -> float | None:
    """The lowest step time K can have given the arms measured in the same cell."""
    measured = measured_seconds(times, k)
    if measured is not None:
        return measured
    below = sorted((arm, s.mean) for arm, s in times.items() if s.count and arm < k)
    if len(below) >= 2:
        (k1, t1), (k2, t2) = below[-2], below[-1]
        rising = max(0.0, (t2 - t1) / (k2 - k1)) * SECANT_FRACTION
        return max(*(t for _, t in below), t2 + (k - k2) * rising)
    if below:
        return max(t for _, t in below)  # a step never gets cheaper with more drafts
    above = [(arm, s.mean) for arm, s in times.items() if s.count and arm > k]
    if not above:
        return None
    arm, seconds = min(above)
    return seconds * (k + 1) / (arm + 1)  # at best, cost shrinks with the tokens verified
