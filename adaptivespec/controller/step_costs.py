"""The learned step cost: seconds per step for each arm, measured per cell, bounded where unmeasured.

Measured arms are used as they are, capped by the larger K measured on their chain (a stalled
step must not bound the arms beyond it). An unmeasured arm gets an *optimistic* bound from the
shape a decode step has along its drafter's chain (arms.py; a roofline: the maximum of linear
costs, so non-decreasing and convex in K): the cost never falls as K grows; beyond the two
largest measured arms it keeps rising at least at half their secant slope (half, because real
kernels are not perfectly convex: on the CPU a 2-token verify can cost more than a 5-token
one); beyond a single measured arm, at half a prior slope per draft token (a draft token is
never free: it costs at least a draft pass and a verified column); and below the smallest
measured arm it shrinks at most with the tokens verified per row (K + 1), nor, where two arms
are measured, faster than twice their secant. Speculation off
(`OFF`) is on every drafter's chain; one drafter's arms bound nothing of another's, except
that a drafting step costs at least a plain one: a drafter with nothing measured on its chain
is bounded by OFF's bound, so it can be priced (and tried) before OFF itself is measured.
Bounded exploration then rarely skips an arm that could win, and stops trying costly ones.

Every drafter's step at K verifies one kernel whichever drafter drafted, K + 1 tokens a row (a
row that found fewer drafts is padded): what one drafter's step at K spent verifying bounds
every other drafter's step at K from below, and, along K by the same shape, its steps at other
K (`verify`). Only the draft is a drafter's own. (When no row found K the verify is narrower,
verify_widths.py; a drafter that often finds less than another can then step below this
bound, which is taken as it is.)
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from itertools import accumulate

from adaptivespec.controller.arms import Arm, chain
from adaptivespec.controller.robust_stat import MIN_ROBUST
from adaptivespec.controller.stats import Summary, samples_of

SECANT_FRACTION = 0.5
# Relative step-time rise per draft token assumed before a cell has two measured arms: below
# what a draft model or a verified column costs on the hardware we know of, so that only arms
# far beyond the measured one are priced out before they are tried.
PRIOR_SLOPE = 0.1
# The share of a smaller batch's step time an arm is bounded by at a larger batch.
BATCH_FRACTION = 0.9
# Steps of an arm and of its reference at a smaller batch before their whole cost ratio bounds
# the arm at a larger one (fewer: half of it), so that one stalled step cannot inflate it.
WHOLE_RATIO_STEPS = 2


class _Chain:
    """One drafter's measured arms (OFF included), sorted once by K."""

    def __init__(self, measured: list[tuple[int, float]]) -> None:
        self._arms = [k for k, _ in measured]
        self._times = [t for _, t in measured]
        self._slowest_up_to = list(accumulate(self._times, max))  # max step time among arms[: i + 1]

    def seconds(self, k: int) -> float | None:
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
        shrunk = seconds * (k + 1) / (arm + 1)  # at best, cost shrinks with the tokens verified
        if len(self._arms) < 2:
            return shrunk
        # Convex along K: below the smallest measured arm the cost falls no faster than the
        # secant above it, taken twice as steep (kernels are not perfectly convex). At a small
        # batch, where a verify's extra tokens cost little, that prices a step with fewer drafts
        # (speculation off, most often) near what it costs, not at a fraction of it.
        slope = max(0.0, (self._times[1] - seconds) / (self._arms[1] - arm)) / SECANT_FRACTION
        return max(shrunk, seconds - slope * (arm - k))


class OptimisticCosts:
    """The lowest step time each arm can have, given one cell's measurements and `floor`."""

    def __init__(
        self,
        seconds: Mapping[Arm, float],
        floor: Callable[[Arm], float | None] | None = None,
        verify: Mapping[int, float] | None = None,
    ) -> None:
        """`seconds`: the measured arms' step times; `verify`: by K, the least seconds a step at
        K was measured verifying, whichever drafter drafted (K = 0: a plain step's)."""
        self._by_arm = _capped(seconds)
        self._chains: dict[str, _Chain] = {}
        self._floor = floor
        self._verify = _Verify(verify or {})

    def seconds(self, arm: Arm) -> float | None:
        """A measured arm's own figure (capped as `_capped` says), else its optimistic bound."""
        measured = self._by_arm.get(arm)
        if measured is not None:
            return measured
        own = self._chain(arm.method).seconds(arm.k) if arm.k else self._off()
        if own is None and arm.k:
            own = self._off()  # a drafter nothing bounds yet: its steps cost at least a plain one
        bounds = [
            b
            for b in (own, self._floor(arm) if self._floor is not None else None, self._verify.seconds(arm.k))
            if b is not None
        ]
        return max(bounds, default=None)

    def _off(self) -> float | None:
        """OFF is on every drafter's chain: the lowest of what each chain bounds it by."""
        methods = {a.method for a in self._by_arm if a.k}
        bounds = [t for m in methods if (t := self._chain(m).seconds(0)) is not None]
        return min(bounds, default=None)

    def _chain(self, method: str) -> _Chain:
        found = self._chains.get(method)
        if found is None:
            arms = chain(self._by_arm, method)
            found = self._chains[method] = _Chain([(a.k, self._by_arm[a]) for a in arms])
        return found


class _Verify:
    """The verify's seconds along K, over every drafter: measured where a step ran at K, else
    bounded by the chain's shape; never above what a larger K's verify took (it cannot fall
    as K grows, so a smaller K measured slower met a stall)."""

    def __init__(self, by_k: Mapping[int, float]) -> None:
        ks = sorted(by_k, reverse=True)
        self._at = dict(zip(ks, accumulate((by_k[k] for k in ks), min), strict=True))
        self._chain = _Chain(sorted(self._at.items()))

    def seconds(self, k: int) -> float | None:
        measured = self._at.get(k)
        return measured if measured is not None else self._chain.seconds(k)


def _measured(times: Mapping[Arm, Summary]) -> dict[Arm, float]:
    return {a: s.mean for a, s in times.items() if s.count}


def _capped(measured: Mapping[Arm, float]) -> dict[Arm, float]:
    """Each measured arm's step time, capped by every larger K measured on its chain (OFF: by
    every drafting arm). The cost never falls as K grows, so a smaller arm measured slower than
    a larger one met a stall (or a kernel's irregularity); left as it is, that one figure would
    bound every unmeasured arm beyond it, and price them out before they are tried."""
    return {
        a: min([t, *(u for b, u in measured.items() if b.k > a.k and (a.k == 0 or b.method == a.method))])
        for a, t in measured.items()
    }


def relative_cost_floor(
    here: Mapping[Arm, Summary], smaller_batch: Mapping[Arm, Summary]
) -> Callable[[Arm], float | None]:
    """A lower bound on an arm's step time from a smaller batch bucket's step times.

    A step never gets cheaper with more rows (the same weights are read, more tokens computed),
    so an arm costs here at least what it cost there (`BATCH_FRACTION` of it: neighbouring
    buckets' kernels are not perfectly regular, nor their measurements quiet). And on a
    roofline the extra tokens of a verify cost a share of the step that grows with the batch
    (the step moves from bandwidth- to compute-bound), so t(K) / t(ref) at a smaller batch is a
    floor for it here, for a reference arm on the same drafter's chain measured in both. Where
    the smaller bucket never ran the arm, its own optimistic bound stands in, so a freshly
    visited large batch does not price an expensive K as if it cost what K = 0 costs (nor a
    small K as if it cost a fraction of the decision's step). Half of the relative excess is
    taken, as above, because real kernels are not perfectly regular; the whole of it where the
    smaller batch measured both arms at least twice (a robust figure is then the lesser of two
    steps or better, so one stall does not inflate the ratio): half of a ratio measured that
    well would have a large batch probe, on every one of its rows, an arm that the smaller
    batch already found no better than its reference.
    """
    common = [a for a, s in here.items() if s.count and a in smaller_batch and smaller_batch[a].count]
    there, here_costs = OptimisticCosts(_measured(smaller_batch)), OptimisticCosts(_measured(here))

    def floor(arm: Arm) -> float | None:
        seconds = there.seconds(arm)
        if seconds is None:
            return None
        bounds = [seconds * BATCH_FRACTION]
        refs = [a for a in chain(common, arm.method) if a.k < arm.k]
        if refs:
            ref = refs[0]
            there_ref, here_ref = there.seconds(ref), here_costs.seconds(ref)
            if there_ref is not None and here_ref is not None and there_ref > 0:
                robust = all(samples_of(smaller_batch.get(a)) >= WHOLE_RATIO_STEPS for a in (arm, ref))
                share = 1.0 if robust else SECANT_FRACTION
                bounds.append(here_ref * (1.0 + share * max(0.0, seconds / there_ref - 1.0)))
        return max(bounds)

    return floor


def relative_cost_ceiling(
    here: Mapping[Arm, Summary], smaller_batch: Mapping[Arm, Summary]
) -> Callable[[Arm], float | None]:
    """An upper bound on a measured arm's step time here, from a larger arm on its chain.

    The floor's monotonicity read the other way: t(K) / t(j) for K > j does not shrink as the
    batch grows, so t(j) here is at most t(K) here times t(j) / t(K) at the smaller batch, for
    a reference K measured in both, and robustly here. A single step is what this checks: one
    that stalled can read far slower than its arm is, and would price the arm out (speculation
    off, most often: the one probe at a large batch). A ceiling only ever raises an arm's upper
    bound, so the whole ratio is taken: an irregular kernel costs one more probe, never a
    pruned arm.
    """

    def ceiling(arm: Arm) -> float | None:
        there = smaller_batch.get(arm)
        if there is None or not there.count:
            return None
        bounds = [
            here[ref].mean * there.mean / smaller_batch[ref].mean
            for ref in here
            if ref.k > arm.k
            and (arm.k == 0 or ref.method == arm.method)
            and samples_of(here[ref]) >= MIN_ROBUST
            and ref in smaller_batch
            and smaller_batch[ref].count
            and smaller_batch[ref].mean > 0
        ]
        return min(bounds, default=None)

    return ceiling
