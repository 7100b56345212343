"""One decision cell (context bucket x batch bucket): what was measured, and which K to use.

The bandit (river, behind `ArmPolicy`) chooses which K to try; the structure decides which
Ks are worth trying. Expected tokens E(a, K) from the live acceptance estimate, divided by
the learned step cost, predicts every arm's goodput: arms predicted far below the best are
never pulled, and the bandit starts from the predictions instead of from nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from adaptivespec.controller.acceptance import expected_tokens
from adaptivespec.controller.bandit import ArmPolicy
from adaptivespec.controller.costmodel import predict_seconds, relative_slope
from adaptivespec.controller.stats import EWStat


@dataclass(frozen=True, slots=True)
class LearningSettings:
    arms: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6, 8)
    prune_margin: float = 0.25  # never try an arm predicted this far below the best
    hysteresis: float = 0.02  # a new decision must beat the current one by this much
    min_samples: int = 3  # measurements before an arm's own mean outranks its prediction
    prior_weight: int = 2  # pseudo-observations seeding the bandit from predictions
    dwell: int = 4  # steps an explored K is held, so K does not flap step to step
    reseed_on_alpha_change: float = 0.05
    fading: float = 0.1


@dataclass(slots=True)
class Cell:
    settings: LearningSettings
    make_bandit: Callable[[], ArmPolicy]
    rewards: dict[int, EWStat] = field(default_factory=dict)  # tokens/row/s over `scale`
    seconds: dict[int, EWStat] = field(default_factory=dict)  # step seconds
    scale: float = 0.0  # tokens/row/s of the first measurement: makes rewards ~1
    decided: int = -1
    current: int = -1
    samples: int = 0
    seeded_alpha: float = -1.0
    candidates: tuple[int, ...] = ()
    _bandit: ArmPolicy | None = None
    _dwell_left: int = 0

    def observe(self, k: int, tokens_per_row: float, step_seconds: float) -> None:
        goodput = tokens_per_row / step_seconds
        if self.scale <= 0.0:
            self.scale = goodput
        reward = goodput / self.scale
        self.rewards.setdefault(k, EWStat(self.settings.fading)).update(reward)
        self.seconds.setdefault(k, EWStat(self.settings.fading)).update(step_seconds)
        self.samples += 1
        if self._bandit is not None and k in self.candidates:
            self._bandit.update(k, reward)

    def predictions(self, alpha: float, slope: float) -> dict[int, float]:
        """Predicted reward of every arm (same units as observed rewards)."""
        own = relative_slope(self.seconds)
        slope = own if own is not None else slope
        predicted = {}
        for k in self.settings.arms:
            seconds = predict_seconds(self.seconds, k, slope)
            if seconds is not None:
                predicted[k] = expected_tokens(alpha, k) / seconds / self.scale
        return predicted

    def estimate(self, k: int, predicted: dict[int, float]) -> float:
        stat = self.rewards.get(k)
        if stat is not None and stat.count >= self.settings.min_samples:
            return stat.mean
        return predicted.get(k, 0.0)

    def next_k(self, alpha: float, slope: float) -> int:
        """Chooses the K for this cell's next step, and updates the decision with hysteresis."""
        if not self.samples:
            return self.current
        predicted = self.predictions(alpha, slope)
        bandit = self._bandit
        if bandit is None or abs(alpha - self.seeded_alpha) > self.settings.reseed_on_alpha_change:
            bandit = self._reseed(alpha, predicted)
        self._decide(predicted)
        if self._dwell_left > 0 and self.current in self.candidates:
            self._dwell_left -= 1
            return self.current
        self.current = bandit.pull(self.candidates)
        self._dwell_left = self.settings.dwell - 1
        return self.current

    def _reseed(self, alpha: float, predicted: dict[int, float]) -> ArmPolicy:
        """A fresh bandit, started from the predictions (measured step times, live acceptance)."""
        estimates = {k: self.estimate(k, predicted) for k in predicted}
        best = max(estimates.values())
        self.candidates = tuple(
            k for k, v in estimates.items() if v >= (1 - self.settings.prune_margin) * best
        )
        bandit = self.make_bandit()
        for k in self.candidates:
            for _ in range(self.settings.prior_weight):
                bandit.update(k, estimates[k])
        self._bandit = bandit
        self.seeded_alpha = alpha
        return bandit

    def _decide(self, predicted: dict[int, float]) -> None:
        best = max(self.candidates, key=lambda k: self.estimate(k, predicted))
        if self.decided not in self.candidates:
            self.decided = best
            return
        margin = 1 + self.settings.hysteresis
        if self.estimate(best, predicted) > margin * self.estimate(self.decided, predicted):
            self.decided = best

    def confidence(self, predicted: dict[int, float]) -> float:
        """Probability-like margin of the decided arm over the runner-up (normal approximation)."""
        from math import erf, sqrt

        others = [k for k in self.candidates if k != self.decided]
        decided = self.rewards.get(self.decided)
        if not others or decided is None or decided.count < 2:
            return 1.0 if not others and decided is not None else 0.0
        runner_up = max(others, key=lambda k: self.estimate(k, predicted))
        second = self.rewards.get(runner_up)
        gap = self.estimate(self.decided, predicted) - self.estimate(runner_up, predicted)
        spread = sqrt(
            decided.stderr**2 + (second.stderr**2 if second is not None and second.count >= 2 else 0.01)
        )
        return 0.5 * (1 + erf(gap / (spread * sqrt(2)))) if spread > 0 else 1.0

    def reset_exploration(self) -> None:
        self._bandit = None


def initial_k(arms: Sequence[int], alpha: float, slope: float) -> int:
    """Before any measurement: the K that maximises E(a, K) / (1 + slope K)."""
    return max(arms, key=lambda k: expected_tokens(alpha, k) / (1.0 + slope * k))
