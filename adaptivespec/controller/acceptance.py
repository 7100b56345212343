"""Online acceptance: how many drafts a row keeps per step at each K, per context bucket.

Acceptance depends on the workload and the context, not on the batch size, so every batch
bucket pools into one estimate per (context bucket, K): a decayed ratio of accepted drafts
over rows, so a step at batch 64 weighs 64 rows and a step at batch 1 weighs one.
Where a K has few rows behind it (batch 1 gives one per step), the geometric model prices
it instead: a per-token rate a keeps sum(a^j, j=1..K) drafts per row, with a pooled over
every measured K (rows-weighted), which is far less noisy than any one K's own average.
"""

from __future__ import annotations

from dataclasses import dataclass


def expected_tokens(alpha: float, k: int) -> float:
    """E(a, K) = (1 - a^(K+1)) / (1 - a): tokens a row emits per step, bonus token included."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def invert_rate(rate: float, k: int) -> float:
    """Per-token a such that sum(a^j, j=1..K) = rate * K (a few Newton steps)."""
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


PRIOR_ROWS = 20.0


@dataclass(slots=True)
class DecayedRatio:
    accepted: float = 0.0
    rows: float = 0.0

    def update(self, accepted: float, rows: float, decay: float) -> None:
        self.accepted = decay * self.accepted + accepted
        self.rows = decay * self.rows + rows

    @property
    def per_row(self) -> float:
        return self.accepted / self.rows if self.rows else 0.0


class AcceptanceEstimator:
    def __init__(self, contexts: int, decay: float = 0.99, prior: float = 0.6, min_rows: float = 200) -> None:
        self.decay = decay
        self.min_rows = min_rows  # rows before a K's own average replaces the pooled model
        self._prior = [prior] * contexts
        self._by_k: list[dict[int, DecayedRatio]] = [{} for _ in range(contexts)]
        self._alpha: list[float | None] = [None] * contexts  # pooled rate, recomputed after an update

    def observe(self, ctx: int, drafted: int, accepted: int, k: int, rows: int) -> None:
        if k > 0 and drafted > 0:
            self._by_k[ctx].setdefault(k, DecayedRatio()).update(accepted, rows, self.decay)
            self._alpha[ctx] = None

    def expected_tokens(self, ctx: int, k: int) -> float:
        if k == 0:
            return 1.0
        measured = self._by_k[ctx].get(k)
        if measured is not None and measured.rows >= self.min_rows:
            return 1.0 + measured.per_row
        return expected_tokens(self.alpha(ctx), k)

    def alpha(self, ctx: int) -> float:
        """Per-token rate pooled over every measured K, rows-weighted, with the prior as PRIOR_ROWS rows.

        The prior keeps a few unlucky rows at batch 1 from making every K > 0 look worthless,
        which would stop the measurements that could correct it.
        """
        cached = self._alpha[ctx]
        if cached is not None:
            return cached
        weight, total = PRIOR_ROWS, PRIOR_ROWS * self._prior[ctx]
        for k, ratio in self._by_k[ctx].items():
            if ratio.rows >= 1.0:
                weight += ratio.rows
                total += ratio.rows * invert_rate(ratio.per_row / k, k)
        self._alpha[ctx] = total / weight
        return total / weight

    def rows(self, ctx: int) -> float:
        return sum(r.rows for r in self._by_k[ctx].values())

    def seed(self, ctx: int, alpha: float) -> None:
        """Restores a saved rate as the prior, until fresh measurements outweigh it."""
        self._prior[ctx] = alpha
        self._alpha[ctx] = None
