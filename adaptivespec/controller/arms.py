"""What a cell chooses among: a drafter and a draft length, with speculation off as one arm.

An arm is (method, K): the drafter that drafts ("ngram", "draft", "suffix", ...) and how many
tokens. K = 0 runs no drafter, so it is one arm, `OFF`, whatever drafters are loaded. Each
drafter's arms form a chain from `OFF` up its K: the step-cost shape (a cost that never falls
as K grows) and the pruning of dominated arms hold along a chain, not across drafters, whose
draft passes cost differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Arm(NamedTuple):
    method: str  # the drafter; "" for OFF
    k: int  # draft length; 0 only for OFF

    def __str__(self) -> str:
        return "off" if self.k == 0 else f"{self.method}:{self.k}"


OFF = Arm("", 0)


def arm(method: str, k: int) -> Arm:
    """The arm of a step that drafted K tokens with `method`: any K = 0 step is `OFF`."""
    return OFF if k <= 0 else Arm(method, k)


def arm_space(methods: Sequence[str], ks: Iterable[int]) -> tuple[Arm, ...]:
    """`OFF`, then every drafter's K > 0 in order: the first drafter's arms first, as every
    host lists them (probe shares split this order)."""
    lengths = sorted({k for k in ks if k > 0})
    return (OFF, *(Arm(method, k) for method in methods for k in lengths))


def chain(arms: Iterable[Arm], method: str) -> list[Arm]:
    """`OFF` (if among `arms`) and `method`'s arms, by K: one drafter's cost curve."""
    return sorted((a for a in arms if a.k == 0 or a.method == method), key=lambda a: a.k)


def distance(a: Arm, b: Arm) -> int:
    """How far apart two arms are for exploration: their K apart, and one more between two
    drafters, so that beside the decision the other drafters at its K are tried as early as
    its K +- 1 (what one drafter finds says little about another)."""
    return abs(a.k - b.k) + (a.k > 0 and b.k > 0 and a.method != b.method)


def methods_of(arms: Iterable[Arm]) -> list[str]:
    """The drafters among `arms`, in order of first appearance."""
    return list(dict.fromkeys(a.method for a in arms if a.k > 0))
