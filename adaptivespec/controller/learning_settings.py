"""How a cell learns: its arms, and the margins, holds and memories that pace its exploration."""

from __future__ import annotations

from dataclasses import dataclass, replace

ARMS = (0, 1, 2, 3, 4, 5, 6, 8)  # the draft lengths learned over, and the oracle's sweep


@dataclass(frozen=True, slots=True)
class LearningSettings:
    arms: tuple[int, ...] = ARMS
    prune_margin: float = 0.15  # never try an arm whose optimistic bound is this far below the best
    hysteresis: float = 0.02  # a new decision must beat the current one by this much
    dwell: int = 4  # steps an explored K is held, once measured, so K does not flap step to step
    fading: float = 0.1  # reward memory (step times keep a window: robust_stat.py)
    switch_share: float = 0.1  # a switch's catch-up may cost at most this share of the dwell it buys
    max_dwell: int = 16  # the longest an explored arm is held to amortise a switch

    def __post_init__(self) -> None:
        if not self.arms or self.arms[0] != 0 or list(self.arms) != sorted(set(self.arms)):
            raise ValueError(f"arms must start at 0 and increase strictly, got {self.arms}")
        if not 0 < self.switch_share <= 1 or self.max_dwell < self.dwell or self.dwell < 1:
            raise ValueError("need 0 < switch_share <= 1 and 1 <= dwell <= max_dwell")

    def capped(self, max_k: int) -> LearningSettings:
        """Only the arms a runner that drafts at most `max_k` tokens can run: K = 8 on a runner
        capped at 4 would be run as 4 and never credited, and an arm that is never credited
        keeps an infinite upper bound."""
        return replace(self, arms=tuple(k for k in self.arms if k <= max_k))

    @property
    def effective_samples(self) -> float:
        """How many recent samples an exponentially weighted mean stands for: (2 - f) / f."""
        return (2 - self.fading) / self.fading
