"""Online acceptance: how many drafts a row keeps per step at each K, per context bucket.

Drafts are prefixes: the first K' drafts of a K-token draft are what K' would have drafted
(prompt lookup copies one span; a draft model decodes left to right). So one survival curve
per context bucket predicts every K: s(j) = P(a row keeps at least j drafts), and a row at
K keeps sum(s(j), j = 1..K) drafts on average. The curve is a product of per-position rates
h(j) = P(keep draft j | kept draft j - 1), Kaplan-Meier style: every step at K informs
positions 1..K, at every batch size (acceptance does not depend on the batch).

Two shapes need this. A draft model's rates are roughly one constant (the geometric
model). Prompt lookup's are not: the first draft is often missing or wrong (no match), and
once a copied span is right the next token usually is too. So the first position has its
own rate, later positions share a pooled "continuation" rate as their prior, and each
position's own measurements take over as its rows accumulate. A step whose drafter found
nothing counts as rows that kept no draft: the K the policy chose is what is being priced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from river import drift

from adaptivespec.controller.arms import Arm

PRIOR_ROWS = 20.0  # pseudo-rows behind each prior rate: a few unlucky rows at batch 1 do not zero it
# Standard errors above each position's rate in the optimistic curve (`hoped_tokens`): what a
# drafter measured on a few rows may yet keep. With one drafter every drafting step measures
# it; with several, a drafter is measured only when it runs, so its first steps would otherwise
# price it by the prior and rule it out unseen. The error counts measured rows only: the prior
# is a guess, not evidence, and a drafter never measured may keep anything (a later position is
# hoped for as its prior, the continuation rate, may yet be: see `_expected_by_k`).
HOPE_Z = 1.0
# The same for a drafter also scored in the shadow of the one that runs (shadow_drafts.py): it
# is learned whether or not it runs, so the hope need not pay for its rows, only stand for
# what a few rows leave unsure. A wider hope spent a short horizon's steps on its arms, one K
# after another (docs/decisions.md, 2026-12-06, first entry).
SHADOWED_HOPE_Z = 0.5
# After a detected change in the first draft's acceptance, a curve keeps at most this many
# rows' worth of what it measured before: the new rows then outweigh the old at once.
ROWS_AFTER_DRIFT = PRIOR_ROWS


def _error(rate: float, rows: float) -> float:
    """A rate's standard error over `rows` measured rows (one more, so that none is not zero)."""
    return (rate * (1 - rate) / (rows + 1)) ** 0.5


def _hope(rate: float, rows: float, z: float) -> float:
    """A rate `z` standard errors up (at most 1)."""
    return min(1.0, rate + z * _error(rate, rows))


def expected_tokens(alpha: float, k: int) -> float:
    """E(a, K) = (1 - a^(K+1)) / (1 - a): tokens a row emits per step, bonus token included."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass(slots=True)
class _Position:
    kept: float = 0.0  # decayed rows that kept this draft
    at_risk: float = 0.0  # decayed rows that kept the previous one, in steps that drafted this far


@dataclass(frozen=True, slots=True)
class AcceptanceRates:
    """A context bucket's curve in two numbers: what the store keeps and a restart starts from."""

    first: float  # P(the first draft is kept)
    continuation: float  # P(draft j is kept | draft j - 1 was), pooled over j >= 2


class AcceptanceEstimator:
    def __init__(self, contexts: int, positions: int = 8, decay: float = 0.99, prior: float = 0.6) -> None:
        self.decay = decay
        self.positions = positions
        self._prior = [AcceptanceRates(prior, prior)] * contexts
        self._curve: list[list[_Position]] = [
            [_Position() for _ in range(positions + 1)] for _ in range(contexts)
        ]  # index 0 unused
        self._tokens: list[list[float] | None] = [None] * contexts  # expected tokens by K, cached
        self._hoped: list[list[float] | None] = [None] * contexts  # ... at the optimistic rates
        self._pooled: list[list[_Position]] = [
            [_Position() for _ in range(positions + 1)] for _ in range(contexts)
        ]  # other hosts' rows (see controller.fleet), beside this host's own
        # Per context bucket, ADWIN over each drafting step's share of rows that kept their first
        # draft (a share that does not depend on K, so exploring K is no change).
        self._changes = [drift.ADWIN() for _ in range(contexts)]
        self.drifts = 0  # changes detected, over every context bucket
        self.shadowed = False  # scored in the shadow of another drafter's steps at least once

    def observe(
        self, ctx: int, k: int, rows: int, kept_at_least: tuple[int, ...], shadow: bool = False
    ) -> None:
        """One step that chose K for `rows` rows; `kept_at_least[j - 1]` rows kept >= j drafts.
        `shadow`: the drafts were scored without running (another drafter's step ran)."""
        if shadow and not self.shadowed:
            self.shadowed = True
            self._hoped = [None] * len(self._hoped)
        previous = float(rows)
        curve = self._curve[ctx]
        if k > 0 and rows > 0:
            first = (kept_at_least[0] if kept_at_least else 0) / rows
            detector = self._changes[ctx]
            detector.update(first)
            if detector.drift_detected:
                self._shrink(ctx)
        for j in range(1, min(k, self.positions) + 1):
            kept = float(kept_at_least[j - 1]) if j <= len(kept_at_least) else 0.0
            position = curve[j]
            position.kept = self.decay * position.kept + kept
            position.at_risk = self.decay * position.at_risk + previous
            previous = kept
        if k > 0:
            self._forget_curve(ctx)

    def expected_tokens(self, ctx: int, k: int) -> float:
        """Tokens a row emits per step at K (bonus token included)."""
        tokens = self._tokens[ctx]
        if tokens is None:
            tokens = self._tokens[ctx] = self._expected_by_k(ctx, 0.0)
        return tokens[min(max(k, 0), self.positions)]

    def hoped_tokens(self, ctx: int, k: int) -> float:
        """Tokens a row may emit per step at K, each position's rate `HOPE_Z` standard errors
        above its estimate (`SHADOWED_HOPE_Z` once shadow-scored): an upper bound that narrows
        as rows are measured."""
        tokens = self._hoped[ctx]
        if tokens is None:
            z = SHADOWED_HOPE_Z if self.shadowed else HOPE_Z
            tokens = self._hoped[ctx] = self._expected_by_k(ctx, z)
        return tokens[min(max(k, 0), self.positions)]

    def _expected_by_k(self, ctx: int, z: float) -> list[float]:
        rates = self.rates(ctx)
        counts = [self._counts(ctx, j) for j in range(1, self.positions + 1)]
        continued = sum(at_risk for _, at_risk in counts[1:])  # measured rows behind the continuation
        # A later position is tied to the continuation rate, its prior: hoped for, it is tied to
        # what that rate may yet be (its error from the measured rows alone), so that a deep
        # position few rows reach is not hoped to keep nearly everything once the later
        # positions together have been measured, and a curve measured on few rows keeps its hope.
        continuation = rates.continuation
        hoped_continuation = _hope(continuation, continued, z)
        expected, survival = [1.0], 1.0
        for j, (kept, at_risk) in enumerate(counts, start=1):
            if j == 1:
                rate = (kept + PRIOR_ROWS * rates.first) / (at_risk + PRIOR_ROWS)
                hoped = _hope(rate, at_risk, z)
            else:
                rate = (kept + PRIOR_ROWS * continuation) / (at_risk + PRIOR_ROWS)
                tied = (kept + PRIOR_ROWS * hoped_continuation) / (at_risk + PRIOR_ROWS)
                hoped = tied + z * _error(rate, at_risk + PRIOR_ROWS)
            survival *= min(1.0, hoped)
            expected.append(expected[-1] + survival)
        return expected

    def _shrink(self, ctx: int) -> None:
        """The drafts' acceptance changed (other traffic, another model): the measured rows
        before the change keep at most `ROWS_AFTER_DRIFT` rows' weight."""
        self.drifts += 1
        curve = self._curve[ctx]
        scale = min(1.0, ROWS_AFTER_DRIFT / curve[1].at_risk) if curve[1].at_risk else 1.0
        for position in curve[1:]:
            position.kept *= scale
            position.at_risk *= scale
        self._forget_curve(ctx)

    def _forget_curve(self, ctx: int) -> None:
        self._tokens[ctx] = self._hoped[ctx] = None

    def rates(self, ctx: int) -> AcceptanceRates:
        """The first-draft and the pooled continuation rate, each shrunk towards its prior."""
        prior = self._prior[ctx]
        first_kept, first_at_risk = self._counts(ctx, 1)
        first = (first_kept + PRIOR_ROWS * prior.first) / (first_at_risk + PRIOR_ROWS)
        later = [self._counts(ctx, j) for j in range(2, self.positions + 1)]
        kept = sum(c[0] for c in later)
        at_risk = sum(c[1] for c in later)
        continuation = (kept + PRIOR_ROWS * prior.continuation) / (at_risk + PRIOR_ROWS)
        return AcceptanceRates(first, continuation)

    def _counts(self, ctx: int, j: int) -> tuple[float, float]:
        own, pooled = self._curve[ctx][j], self._pooled[ctx][j]
        return own.kept + pooled.kept, own.at_risk + pooled.at_risk

    def pool(self, positions: Mapping[tuple[int, int], tuple[float, float]]) -> None:
        """Replaces the other hosts' (kept, at risk) rows per (context bucket, position)."""
        for ctx, curve in enumerate(self._pooled):
            for j in range(1, self.positions + 1):
                kept, at_risk = positions.get((ctx, j), (0.0, 0.0))
                curve[j] = _Position(kept, at_risk)
            self._forget_curve(ctx)

    def rows(self, ctx: int) -> float:
        return self._curve[ctx][1].at_risk

    def seed(self, ctx: int, rates: AcceptanceRates) -> None:
        """Restores saved rates as the prior, until fresh measurements outweigh them."""
        self._prior[ctx] = rates
        self._forget_curve(ctx)


class Acceptance(Protocol):
    """What a cell prices arms with: tokens per row per step at each arm."""

    def __call__(self, arm: Arm) -> float:
        """Expected tokens per row per step at the arm."""
        ...

    def hoped(self, arm: Arm) -> float:
        """What the arm may yet emit: an upper bound that narrows as its drafter is measured."""
        ...


@dataclass(frozen=True, slots=True)
class ArmTokens:
    """Tokens per row per step at each arm of one context bucket, from its drafter's estimator
    (speculation off emits exactly one)."""

    estimators: Mapping[str, AcceptanceEstimator]  # by drafter
    ctx: int

    def __call__(self, arm: Arm) -> float:
        return self.estimators[arm.method].expected_tokens(self.ctx, arm.k) if arm.k else 1.0

    def hoped(self, arm: Arm) -> float:
        """What the arm may yet emit: its drafter's optimistic curve (`hoped_tokens`)."""
        return self.estimators[arm.method].hoped_tokens(self.ctx, arm.k) if arm.k else 1.0
