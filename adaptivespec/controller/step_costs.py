"""The learned step cost: seconds per step for each K, measured per cell, bounded where unmeasured.

Measured arms are used as they are. An unmeasured arm gets an *optimistic* bound from the
shape a decode step has (a roofline: the maximum of linear costs, so non-decreasing and
convex in K): the cost never falls as K grows; beyond the two largest measured arms it keeps
rising at least at half their secant slope (half, because real kernels are not perfectly
convex: on the CPU a 2-token verify can cost more than a 5-token one); beyond a single
measured arm, at half a prior slope per draft token (a draft token is never free: it costs
at least a draft pass and a verified column); and below the smallest measured arm it shrinks
at most with the tokens verified per row (K + 1).
Bounded exploration then rarely skips an arm that could win, and stops trying costly ones.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from itertools import accumulate

from adaptivespec.controller.stats import Summary

SECANT_FRACTION = 0.5
# Relative step-time rise per draft token assumed before a cell has two measured arms: below
# what a draft model or a verified column costs on the hardware we know of, so that only arms
# far beyond the measured one are priced out before they are tried.
PRIOR_SLOPE = 0.1


class OptimisticCosts:
    """The lowest step time each K can have, given one cell's measurements (sorted once) and `floor`."""

    def __init__(
        self, times: Mapping[int, Summary], floor: Callable[[int], float | None] | None = None
    ) -> None:
        measured = sorted((k, s.mean) for k, s in times.items() if s.count)
        self._arms = [k for k, _ in measured]
        self._times = [t for _, t in measured]
        self._slowest_up_to = list(accumulate(self._times, max))  # max step time among arms[: i + 1]
        self._by_k = dict(measured)
        self._floor = floor

    def seconds(self, k: int) -> float | None:
        measured = self._by_k.get(k)
        if measured is not None:
            return measured
        own = self._from_cell(k)
        elsewhere = self._floor(k) if self._floor is not None else None
        if own is None or elsewhere is None:
            return own if elsewhere is None else elsewhere
        return max(own, elsewhere)

    def _from_cell(self, k: int) -> float | None:
        below = bisect_left(self._arms, k)  # how many measured arms are smaller than k
        if below >= 2:
            k1, k2 = self._arms[below - 2], self._arms[below - 1]
            t1, t2 = self._times[below - 2], self._times[below - 1]
            rising = max(0.0, (t2 - t1) / (k2 - k1)) * SECANT_FRACTION
            return max(self._slowest_up_to[below - 1], t2 + (k - k2) * rising)
        if below == 1:  # a step never gets cheaper with more drafts, nor do drafts come free
            arm, seconds = self._arms[0], self._times[0]
            return seconds * (1 + SECANT_FRACTION * PRIOR_SLOPE * (k - arm))
        if not self._arms:
            return None
        arm, seconds = self._arms[0], self._times[0]
        return seconds * (k + 1) / (arm + 1)  # at best, cost shrinks with the tokens verified


def relative_cost_floor(
    here: Mapping[int, Summary], smaller_batch: Mapping[int, Summary]
) -> Callable[[int], float | None]:
    """A lower bound on K's step time from a smaller batch bucket's step times.

    On a roofline the extra tokens of a verify cost a share of the step that grows with the
    batch (the step moves from bandwidth- to compute-bound), so t(K) / t(ref) at a smaller
    batch is a floor for it here. Where the smaller bucket never ran K, its own optimistic
    bound stands in, so a freshly visited large batch does not price an expensive K as if it
    cost what K=0 costs. Half of the excess is taken, as above, because real kernels are not
    perfectly regular.
    """
    common = [k for k, s in here.items() if s.count and k in smaller_batch and smaller_batch[k].count]
    if not common:
        return lambda k: None
    ref = min(common)
    here_ref, there_ref = here[ref].mean, smaller_batch[ref].mean
    there = OptimisticCosts(smaller_batch)

    def floor(k: int) -> float | None:
        seconds = there.seconds(k)
        if k <= ref or seconds is None or there_ref <= 0:
            return None
        return here_ref * (1.0 + SECANT_FRACTION * max(0.0, seconds / there_ref - 1.0))

    return floor
