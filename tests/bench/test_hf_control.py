"""The oracles of `bench control --backend hf`, on hand-made measurements."""

from __future__ import annotations

import numpy as np
import pytest

from adaptivespec.bench.hf_control import PooledOracle, cross_fitted_oracle
from adaptivespec.bench.interleaved import Contender, Measurement
from adaptivespec.engine.static_policy import FixedK
from adaptivespec.sim.loop import PhaseResult

ARMS = (Contender("k0", FixedK(0)), Contender("k1", FixedK(1)))


def _measured(goodput_per_repeat: dict[str, list[float]]) -> Measurement:
    """One batch-1 phase; each segment ran 1 second, so its tokens are its goodput."""
    measurement = Measurement(concurrency=(1,), segment_steps=10)
    for name, goodputs in goodput_per_repeat.items():
        measurement.segments[name] = [[PhaseResult(1, 10, int(g), 1.0) for g in goodputs]]
    return measurement


def test_the_pooled_oracle_is_scored_by_the_luck_that_picked_it_and_the_cross_fitted_one_is_not() -> None:
    # k1's one lucky repeat makes it the best arm pooled (20.7 vs 20.0 tokens/s) ...
    measurement = _measured({"k0": [20, 20, 20], "k1": [40, 10, 12]})
    pooled = PooledOracle.of(measurement, ARMS)
    assert [a.k for a in pooled.arm_by_phase] == [1]
    assert pooled.tokens.sum() / pooled.seconds.sum() == pytest.approx(62 / 3)
    # ... but each repeat is scored by the K the others chose: k0 for the lucky one, k1 elsewhere.
    tokens, seconds = cross_fitted_oracle(measurement, ARMS)
    np.testing.assert_array_equal(tokens, [[20, 10, 12]])
    np.testing.assert_array_equal(seconds, [[1.0, 1.0, 1.0]])


def test_a_clear_winner_gives_the_same_cross_fitted_and_pooled_oracle() -> None:
    measurement = _measured({"k0": [10, 11, 9], "k1": [20, 22, 19]})
    pooled = PooledOracle.of(measurement, ARMS)
    tokens, seconds = cross_fitted_oracle(measurement, ARMS)
    np.testing.assert_array_equal(tokens, pooled.tokens)
    np.testing.assert_array_equal(seconds, pooled.seconds)


def test_one_repeat_cannot_be_cross_fitted() -> None:
    with pytest.raises(ValueError, match="at least 2 repeats"):
        cross_fitted_oracle(_measured({"k0": [1], "k1": [2]}), ARMS)
