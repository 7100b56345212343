"""Choices scored on the repeats they were not made on, on hand-made ratios."""

from __future__ import annotations

import numpy as np
import pytest

from adaptivespec.bench.cross_fit import cross_fitted_rival, repeat_ratios

ORACLE = np.ones((1, 3))  # [phase, repeat]: one token a second, so a ratio is a contender's tokens


def _tokens(*per_repeat: list[float]) -> np.ndarray:
    """[contender, phase, repeat] for one phase, each segment one second long."""
    return np.array([[row] for row in per_repeat], dtype=np.float64)


def test_a_pick_made_on_noise_is_scored_by_its_next_run_not_by_its_luck() -> None:
    # Three rivals alike on the mean (10), each lucky on one repeat: whichever the other repeats
    # rank first is the one whose luck fell there, so it scores 8 where it is scored.
    tokens = _tokens([14, 8, 8], [8, 8, 14], [8, 14, 8])
    scores, picks = cross_fitted_rival(tokens, np.ones_like(tokens), ORACLE, ORACLE, [0, 1, 2])
    np.testing.assert_array_equal(scores, [8, 8, 8])
    assert picks == [1, 0, 0]


def test_a_clear_winner_is_picked_on_every_repeat() -> None:
    tokens = _tokens([12, 13, 11], [10, 10, 10], [9, 9, 9])
    scores, picks = cross_fitted_rival(tokens, np.ones_like(tokens), ORACLE, ORACLE, [0, 1, 2])
    np.testing.assert_array_equal(scores, [12, 13, 11])
    assert picks == [0, 0, 0]


def test_only_the_rivals_named_are_picked_and_each_repeat_is_scored_alone() -> None:
    tokens = _tokens([20, 20, 20], [10, 11, 12], [6, 7, 5])
    seconds = np.ones_like(tokens)
    scores, picks = cross_fitted_rival(tokens, seconds, ORACLE, ORACLE, [1, 2])
    assert picks == [1, 1, 1]
    np.testing.assert_array_equal(repeat_ratios(tokens, seconds, ORACLE, ORACLE), tokens[:, 0])
    np.testing.assert_array_equal(scores, tokens[1, 0])


def test_one_repeat_cannot_be_cross_fitted() -> None:
    tokens = _tokens([1.0], [2.0])
    with pytest.raises(ValueError, match="at least 2 repeats"):
        cross_fitted_rival(tokens, np.ones_like(tokens), ORACLE[:, :1], ORACLE[:, :1], [0, 1])
