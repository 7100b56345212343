"""Which arms a cell may still spend a step on, from their bounds: pure, over one step's prices.

An arm stays a candidate while its upper bound is within `margin` of the best prediction and
above the decision's lower bound: exploration never spends a step on an arm the measurements
already show to be worse. Arms above the decision whose bound is below even the margin, or
that a smaller K dominates, are out here; those measured enough to judge are ruled out at
larger batches too (`inherited` there): an arm priced on one or two steps, which may have
stalled, is left for each batch to try again. OFF, the cheapest step and the baseline every
other arm must beat, is always measured before it can be pruned: its bound is inferred from
the other arms, and an optimistic acceptance estimate would otherwise rule it out unseen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from adaptivespec.controller.arms import OFF, Arm, chain, methods_of
from adaptivespec.controller.robust_stat import MIN_ROBUST


@dataclass(frozen=True, slots=True)
class Pruned:
    candidates: tuple[Arm, ...]  # in the order of the bounds given
    ruled_out: frozenset[Arm]  # judged out here, or inherited: out at larger batches too


def prune(
    upper: Mapping[Arm, float],
    lowers: Mapping[Arm, float],
    predicted: Mapping[Arm, float],
    *,
    decided: Arm,
    support: Mapping[Arm, float],
    inherited: frozenset[Arm],
    margin: float,
) -> Pruned:
    """`upper`: every arm's optimistic bound; `lowers`, `predicted`: the measured arms' lower
    bounds and estimates; `support`: the steps each measured arm's estimate stands on."""
    margin_floor = (1 - margin) * max(predicted.values())
    floor = max(margin_floor, lowers.get(decided, 0.0))
    pruned_above = {k for k, bound in upper.items() if k.k > decided.k and bound < margin_floor}
    out_here = dominated(upper, lowers) | pruned_above | inherited
    judged = {k for k in out_here if support.get(k, 0.0) >= MIN_ROBUST}
    candidates = tuple(
        k
        for k, bound in upper.items()
        if k == decided or (bound >= floor and k not in out_here) or (k == OFF and k not in predicted)
    )
    return Pruned(candidates, frozenset(judged) | inherited)


def dominated(upper: Mapping[Arm, float], lowers: Mapping[Arm, float]) -> frozenset[Arm]:
    """Arms whose upper bound is below the lower bound of a smaller K on their drafter's chain
    (OFF is never dominated)."""
    out: set[Arm] = set()
    for method in methods_of(upper):
        best_lower_below = 0.0
        for k in chain(upper, method):
            if upper[k] < best_lower_below:
                out.add(k)
            best_lower_below = max(best_lower_below, lowers.get(k, 0.0))
    return frozenset(out)
