"""Online acceptance: the per-token rate a, estimated from each step's accepted/drafted ratio.

A step at draft length K with per-token rate a accepts sum(a^j, j=1..K) drafts per row on
average, so the reported ratio r = accepted / drafted gives a by inverting that sum (a few
Newton steps). Acceptance depends on the workload and the context, not on the batch size,
so one estimate per context bucket serves every batch bucket.
"""

from __future__ import annotations

from adaptivespec.controller.stats import EWStat


def expected_tokens(alpha: float, k: int) -> float:
    """E(a, K) = (1 - a^(K+1)) / (1 - a): tokens a row emits per step, bonus token included."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def invert_rate(rate: float, k: int) -> float:
    """Per-token a such that sum(a^j, j=1..K) = rate * K."""
    if k <= 1 or rate <= 0.0:
        return min(max(rate, 0.0), 0.999)
    target = rate * k
    alpha = min(max(rate, 0.05), 0.999)
    for _ in range(6):
        power, total, slope = 1.0, 0.0, 0.0
        for j in range(1, k + 1):
            slope += j * power
            power *= alpha
            total += power
        alpha = min(max(alpha - (total - target) / slope, 0.0), 0.999)
    return alpha


class AcceptanceEstimator:
    def __init__(self, contexts: int, fading: float = 0.05, prior: float = 0.6) -> None:
        self.prior = prior
        self._stats = [EWStat(fading) for _ in range(contexts)]

    def observe(self, ctx: int, drafted: int, accepted: int, k: int, rows: int) -> None:
        if k > 0 and drafted > 0:
            self._stats[ctx].update(invert_rate(accepted / drafted, k))

    def alpha(self, ctx: int) -> float:
        stat = self._stats[ctx]
        if stat.count:
            return stat.mean
        seen = [s.mean for s in self._stats if s.count]
        return sum(seen) / len(seen) if seen else self.prior

    def stat(self, ctx: int) -> EWStat:
        return self._stats[ctx]
