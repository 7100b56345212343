"""Exponentially weighted mean and variance with a count: the plain numbers the store keeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class Summary(Protocol):
    """What the cells read of a step-time statistic, whichever estimator kept it."""

    mean: float
    var: float
    count: int


def samples_of(stat: Summary | None) -> int:
    """The steps a step-time estimate stands on: a robust stat's window; pooled stats count all."""
    if stat is None:
        return 0
    recent = getattr(stat, "samples", None)
    return int(recent if recent is not None else stat.count)


@dataclass(slots=True)
class EWStat:
    fading: float = 0.1  # weight of the newest sample
    mean: float = 0.0
    var: float = 0.0
    count: int = 0

    def update(self, x: float) -> None:
        self.count += 1
        if self.count == 1:
            self.mean, self.var = x, 0.0
            return
        weight = max(self.fading, 1.0 / self.count)  # plain mean until the window fills
        delta = x - self.mean
        self.mean += weight * delta
        self.var = (1 - weight) * (self.var + weight * delta * delta)
