"""The acceptance curve: one estimate per context bucket that prices every K, for both draft shapes."""

from __future__ import annotations

import numpy as np
import pytest

from adaptivespec.controller.acceptance import AcceptanceEstimator, AcceptanceRates
from adaptivespec.engine.telemetry import survival_counts


def _true_tokens(first: float, continuation: float, k: int) -> float:
    survival, tokens = 1.0, 1.0
    for j in range(1, k + 1):
        survival *= first if j == 1 else continuation
        tokens += survival
    return tokens


def _kept(rng: np.random.Generator, rows: int, k: int, first: float, continuation: float) -> list[int]:
    """Accepted drafts per row: the first kept with `first`, each later one with `continuation`."""
    out = []
    for _ in range(rows):
        kept = 0
        while kept < k and rng.random() < (first if kept == 0 else continuation):
            kept += 1
        out.append(kept)
    return out


def _observe(
    estimator: AcceptanceEstimator, steps: int, k: int, rows: int, rates: tuple[float, float]
) -> None:
    rng = np.random.default_rng([steps, k, rows])
    for _ in range(steps):
        kept = _kept(rng, rows, k, *rates)
        estimator.observe(0, k, rows, survival_counts(kept, k))


def test_survival_counts() -> None:
    assert survival_counts([0, 3, 1, 3, 2], 3) == (4, 3, 2)
    assert survival_counts([], 2) == (0, 0)
    assert survival_counts([0, 0], 0) == ()


@pytest.mark.parametrize(("first", "continuation"), [(0.7, 0.7), (0.3, 0.9)])
def test_measuring_long_drafts_prices_every_shorter_one(first: float, continuation: float) -> None:
    """Drafts are prefixes, so steps at K = 8 alone predict K = 1..8, geometric or bursty alike."""
    estimator = AcceptanceEstimator(1, decay=1.0)
    _observe(estimator, 400, 8, 8, (first, continuation))
    for k in range(9):
        assert estimator.expected_tokens(0, k) == pytest.approx(
            _true_tokens(first, continuation, k), rel=0.05
        )


def test_bursty_drafts_are_not_priced_as_geometric() -> None:
    """Prompt lookup: a span is often missing, but once right it usually runs on. Measured at
    K = 2 only, the long drafts are priced by the continuation rate, not by the first rate."""
    estimator = AcceptanceEstimator(1, decay=1.0)
    _observe(estimator, 600, 2, 4, (0.3, 0.9))
    rates = estimator.rates(0)
    assert rates.first == pytest.approx(0.3, abs=0.04)
    assert rates.continuation == pytest.approx(0.9, abs=0.05)
    assert estimator.expected_tokens(0, 8) == pytest.approx(_true_tokens(0.3, 0.9, 8), rel=0.1)
    geometric = 1 + sum(0.3**j for j in range(1, 9))
    assert estimator.expected_tokens(0, 8) > 1.5 * geometric


def test_a_step_that_drafted_nothing_counts_as_rows_that_kept_nothing() -> None:
    """What is priced is the K the policy chose: where the drafter finds no match, that K ran plain."""
    found = AcceptanceEstimator(1, decay=1.0)
    sometimes = AcceptanceEstimator(1, decay=1.0)
    for step in range(200):
        found.observe(0, 4, 1, (1, 1, 1, 1))
        if step % 2:
            sometimes.observe(0, 4, 1, (1, 1, 1, 1))
        else:
            sometimes.observe(0, 4, 1, ())  # no match: a plain step
    assert found.expected_tokens(0, 4) > 4.5
    assert sometimes.expected_tokens(0, 4) == pytest.approx(1 + 0.5 * 4, rel=0.1)


def test_a_seeded_prior_holds_until_measurements_outweigh_it() -> None:
    estimator = AcceptanceEstimator(1)
    estimator.seed(0, AcceptanceRates(0.2, 0.95))
    assert estimator.expected_tokens(0, 3) == pytest.approx(_true_tokens(0.2, 0.95, 3))
    assert estimator.expected_tokens(0, 0) == 1.0
    _observe(estimator, 300, 3, 8, (0.8, 0.8))
    assert estimator.expected_tokens(0, 3) == pytest.approx(_true_tokens(0.8, 0.8, 3), rel=0.05)


def _first_rates(seed: int, steps: tuple[tuple[int, float], ...], rows: int = 8) -> tuple[float, int, float]:
    """Feeds K = 1 steps of `rows` rows at each (steps, first-draft rate); returns the
    estimator's first rate, its detected changes, and what the decay alone would estimate."""
    rng = np.random.default_rng(seed)
    estimator = AcceptanceEstimator(1, positions=1)
    kept_sum = at_risk_sum = 0.0
    for count, rate in steps:
        for _ in range(count):
            kept = _kept(rng, rows, 1, rate, rate)
            estimator.observe(0, 1, rows, survival_counts(kept, 1))
            kept_sum = estimator.decay * kept_sum + sum(kept)
            at_risk_sum = estimator.decay * at_risk_sum + rows
    decay_only = (kept_sum + 20 * 0.6) / (at_risk_sum + 20)  # the prior's 20 rows at 0.6
    return estimator.rates(0).first, estimator.drifts, decay_only


def test_a_change_in_acceptance_is_detected_and_the_curve_follows_it_at_once() -> None:
    """0.8 falls to 0.4: 60 steps later the estimate is below 0.55, where the decay alone would
    still be above 0.58 (the power check); a steady 0.8 or 0.4 is never taken for a change."""
    for seed in range(5):
        first, drifts, decay_only = _first_rates(seed, ((400, 0.8), (60, 0.4)))
        assert drifts >= 1 and first < 0.55, (seed, first, drifts)
        assert decay_only > 0.58
        for rate in (0.8, 0.4):
            steady, none, _ = _first_rates(seed, ((460, rate),))
            assert none == 0 and abs(steady - rate) < 0.06, (seed, rate, steady)


def test_a_position_no_row_reached_is_hoped_for_as_the_continuation_may_yet_be() -> None:
    """Measured at K = 3 on 400 rows (first draft kept at 0.55, later ones at 0.6): positions
    4-8 were never reached, but their prior, the continuation rate, stands on the rows of
    positions 2-3. So K = 8 is hoped to keep at most 0.7 tokens more than K = 3 (0.62; hoping
    each unreached position keeps every draft, as its own rows alone would: 1.29), while a
    drafter never measured may hope for every draft kept."""
    measured = AcceptanceEstimator(1)
    _observe(measured, 100, 3, 4, (0.55, 0.6))
    assert measured.hoped_tokens(0, 8) - measured.hoped_tokens(0, 3) <= 0.7
    assert measured.hoped_tokens(0, 8) > measured.expected_tokens(0, 8)  # still a hope
    assert AcceptanceEstimator(1).hoped_tokens(0, 8) == pytest.approx(9.0)


def test_a_drafter_scored_in_the_shadow_hopes_less_widely_than_one_learned_only_by_running() -> None:
    """The same 20 rows, once as a drafter's own steps and once as shadow scores: the shadowed
    curve's hope is narrower (it is learned whether or not it runs), and still above its
    estimate, also in a context bucket it has no rows in."""
    ran, shadowed = AcceptanceEstimator(2), AcceptanceEstimator(2)
    rng = np.random.default_rng(3)
    for _ in range(5):
        counts = survival_counts(_kept(rng, 4, 4, 0.6, 0.6), 4)
        ran.observe(0, 4, 4, counts)
        shadowed.observe(0, 4, 4, counts, shadow=True)
    assert ran.expected_tokens(0, 4) == shadowed.expected_tokens(0, 4)  # the same evidence
    assert shadowed.expected_tokens(0, 4) < shadowed.hoped_tokens(0, 4) < ran.hoped_tokens(0, 4)
    assert shadowed.expected_tokens(1, 8) < shadowed.hoped_tokens(1, 8) < ran.hoped_tokens(1, 8)
