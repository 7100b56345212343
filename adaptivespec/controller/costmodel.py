"""The learned step cost: seconds per step for each K, measured per cell, bounded where unmeasured.

Measured arms are used as they are. An unmeasured arm gets an *optimistic* bound from the
shape every decode step has (it is a roofline): the cost never falls as K grows, and at
most grows in proportion to the tokens verified per row (K + 1). Bounded exploration then
never skips an arm that could win, yet never tries one that cannot.
"""

from __future__ import annotations

from collections.abc import Mapping

from adaptivespec.controller.stats import EWStat


def measured_seconds(times: Mapping[int, EWStat], k: int) -> float | None:
    stat = times.get(k)
    return stat.mean if stat is not None and stat.count else None


def optimistic_seconds(times: Mapping[int, EWStat], k: int) -> float | None:
    """The lowest step time K can have given the arms measured in the same cell."""
    measured = measured_seconds(times, k)
    if measured is not None:
        return measured
    below = [s.mean for arm, s in times.items() if s.count and arm < k]
    if below:
        return max(below)  # a step never gets cheaper with more drafts
    above = [(arm, s.mean) for arm, s in times.items() if s.count and arm > k]
    if not above:
        return None
    arm, seconds = min(above)
    return seconds * (k + 1) / (arm + 1)  # at best, cost shrinks with the tokens verified
