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

from collections.abc import Callable, Mapping

from adaptivespec.controller.stats import EWStat

SECANT_FRACTION = 0.5


def measured_seconds(times: Mapping[int, EWStat], k: int) -> float | None:
    stat = times.get(k)
    return stat.mean if stat is not None and stat.count else None


def optimistic_seconds(
    times: Mapping[int, EWStat], k: int, floor: Callable[[int], float | None] | None = None
) -> float | None:
    """The lowest step time K can have given the arms measured in the same cell (and `floor`)."""
    measured = measured_seconds(times, k)
    if measured is not None:
        return measured
    own = _bound_from_cell(times, k)
    elsewhere = floor(k) if floor is not None else None
    if own is None or elsewhere is None:
        return own if elsewhere is None else elsewhere
    return max(own, elsewhere)


def relative_cost_floor(
    here: Mapping[int, EWStat],
    smaller_batch: Mapping[int, EWStat],
    smaller_floor: Callable[[int], float | None] | None = None,
) -> Callable[[int], float | None]:
    """A lower bound on K's step time from a smaller batch bucket's step times.

    On a roofline the extra tokens of a verify cost a share of the step that grows with the
    batch (the step moves from bandwidth- to compute-bound), so t(K) / t(ref) at a smaller
    batch is a floor for it here. Where the smaller bucket never ran K, its own optimistic
    bound stands in (itself floored by the next smaller bucket), so a freshly visited large
    batch does not price an expensive K as if it cost what K=0 costs. Half of the excess is
    taken, as above, because real kernels are not perfectly regular.
    """
    common = [k for k, s in here.items() if s.count and k in smaller_batch and smaller_batch[k].count]
    if not common:
        return lambda k: None
    ref = min(common)
    here_ref, there_ref = here[ref].mean, smaller_batch[ref].mean

    def floor(k: int) -> float | None:
        there = optimistic_seconds(smaller_batch, k, smaller_floor)
        if k <= ref or there is None or there_ref <= 0:
            return None
        return here_ref * (1.0 + SECANT_FRACTION * max(0.0, there / there_ref - 1.0))

    return floor


def _bound_from_cell(times: Mapping[int, EWStat], k: int) -> float | None:
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
