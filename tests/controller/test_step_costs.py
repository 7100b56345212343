"""Optimistic step-cost bounds for arms a cell has not measured (step_costs.py)."""

import pytest

from adaptivespec.controller.arms import OFF, Arm, arm
from adaptivespec.controller.robust_stat import RobustStat
from adaptivespec.controller.stats import EWStat, Summary
from adaptivespec.controller.step_costs import OptimisticCosts, relative_cost_ceiling, relative_cost_floor


def test_the_cost_never_falls_as_k_grows_beyond_the_measured_arms() -> None:
    costs = OptimisticCosts({OFF: 0.010, arm("ngram", 1): 0.011, arm("ngram", 2): 0.013})
    assert costs.seconds(arm("ngram", 3)) == pytest.approx(0.013 + 0.5 * 0.002)  # half the secant
    assert costs.seconds(arm("suffix", 3)) == pytest.approx(0.010 * (1 + 3 * 0.05))  # from off


def test_a_stalled_smaller_arm_does_not_price_out_the_arms_beyond_it() -> None:
    """K = 0's one step stalled (4x): K = 1 and K = 2, measured cheaper, say what it costs at
    most, so the unmeasured K = 8 is bounded by them and not by the stall."""
    stalled = {OFF: 0.160, arm("ngram", 1): 0.040, arm("ngram", 2): 0.041}
    costs = OptimisticCosts(stalled)
    assert costs.seconds(OFF) == 0.040
    assert costs.seconds(arm("ngram", 8)) == pytest.approx(0.041 + 6 * 0.5 * 0.001)
    assert costs.seconds(arm("suffix", 4)) == pytest.approx(0.040 * (1 + 4 * 0.05))  # from off


def test_a_drafter_never_run_is_bounded_by_a_plain_step_before_off_is_measured() -> None:
    """Only prompt lookup measured (K = 1 and 2), not OFF: a suffix arm costs at least a plain
    step, which the measured arms bound. Without that bound the suffix arms could not be
    priced, and every prompt-lookup arm went first."""
    costs = OptimisticCosts({arm("ngram", 1): 0.012, arm("ngram", 2): 0.013})
    assert costs.seconds(OFF) == pytest.approx(0.012 - 2 * 0.001)  # twice the secant below K = 1
    assert costs.seconds(arm("suffix", 4)) == costs.seconds(OFF)
    # One arm measured: K = 1's time over the 2 tokens it verified.
    assert OptimisticCosts({arm("ngram", 1): 0.012}).seconds(OFF) == pytest.approx(0.012 / 2)
    assert OptimisticCosts({}).seconds(arm("suffix", 4)) is None  # nothing measured: nothing bounds it


def test_below_the_measured_arms_the_cost_falls_no_faster_than_twice_their_secant() -> None:
    """A small batch: K = 1, 2 and 3 at 7.9, 9.4 and 11.0 ms, 1.55 ms a draft. Speculation off
    costs at least 7.9 - 2 x 1.55 ms, not K = 1's time over its 2 tokens (3.9 ms): at that bound a
    plain step's one token would have out-earned K = 2's two at 9.4 ms, and been probed. Where a
    verified token costs much (a large batch), the tokens' bound is the higher one and stands."""
    small = OptimisticCosts({arm("ngram", 1): 0.0079, arm("ngram", 2): 0.0094, arm("ngram", 3): 0.0110})
    assert small.seconds(OFF) == pytest.approx(0.0079 - 2 * 0.0015)
    assert 1 / small.seconds(OFF) < 2.0 / 0.0094  # K = 2 keeps about 2 tokens a step here
    steep = OptimisticCosts({arm("ngram", 2): 0.030, arm("ngram", 4): 0.060})
    assert steep.seconds(OFF) == pytest.approx(0.030 / 3)
    assert steep.seconds(arm("ngram", 1)) == pytest.approx(0.030 * 2 / 3)


def test_what_one_drafter_spent_verifying_bounds_another_drafters_arms() -> None:
    """Prompt lookup ran K = 2 and K = 4, its steps 13 and 17 ms, of which 12 and 16 verifying;
    every drafter verifies K + 1 tokens a row, so a suffix step at K = 4 costs at least those
    16 ms (its own chain alone, OFF only, would allow 12), and between and beyond the measured
    K the verify keeps rising as the chain's shape says: at half the secant of the two below."""
    measured = {OFF: 0.010, arm("ngram", 2): 0.013, arm("ngram", 4): 0.017}
    verify = {0: 0.010, 2: 0.012, 4: 0.016}
    costs = OptimisticCosts(measured, verify=verify)
    assert OptimisticCosts(measured).seconds(arm("suffix", 4)) == pytest.approx(0.010 * (1 + 4 * 0.05))
    assert costs.seconds(arm("suffix", 4)) == pytest.approx(0.016)
    assert costs.seconds(arm("suffix", 3)) == pytest.approx(0.012 + 0.5 * 0.001)
    assert costs.seconds(arm("suffix", 8)) == pytest.approx(0.016 + 4 * 0.5 * 0.002)
    # a stalled verify at a smaller K never bounds more than a larger K's verify took
    stalled = OptimisticCosts(measured, verify={0: 0.010, 2: 0.040, 4: 0.016})
    assert stalled.seconds(arm("suffix", 2)) == pytest.approx(0.016)


def test_a_smaller_batch_bounds_the_relative_cost_of_drafting_here() -> None:
    def stats(seconds: dict[Arm, float], count: int = 5) -> dict[Arm, Summary]:
        return {a: EWStat(mean=t, count=count) for a, t in seconds.items()}

    smaller = stats({OFF: 0.010, arm("ngram", 1): 0.012, arm("ngram", 4): 0.020})
    here = stats({OFF: 0.020, arm("ngram", 1): 0.030})
    floor = relative_cost_floor(here, smaller)
    # K = 4 cost 2x K = 0 there, each measured more than once: here at least 2x K = 0's time
    assert floor(arm("ngram", 4)) == pytest.approx(0.020 * 2.0)
    # measured once there, either may have stalled: half the excess
    once = smaller | stats({arm("ngram", 4): 0.020}, count=1)
    assert relative_cost_floor(here, once)(arm("ngram", 4)) == pytest.approx(0.020 * (1 + 0.5 * 1.0))
    stalled = stats({OFF: 0.010, arm("ngram", 1): 0.050, arm("ngram", 2): 0.014, arm("ngram", 4): 0.020})
    assert relative_cost_floor(here, stalled)(arm("ngram", 4)) == pytest.approx(0.020 * 2.0)
    # a stalled K = 1 there, slower than K = 2: it counts as K = 2's 14 ms, not its own 50
    assert relative_cost_floor(here, stalled)(arm("ngram", 2)) == pytest.approx(0.020 * 1.4)


def test_an_arm_costs_at_least_most_of_what_it_cost_at_a_smaller_batch() -> None:
    """Only the decision (K = 5) measured here: its chain alone would let K = 1 cost a third of
    its step (the tokens it verifies), but K = 1 took 20 ms one bucket down, and a step never
    gets cheaper with more rows. An arm never run there is bounded by its bound there."""

    def stats(seconds: dict[Arm, float]) -> dict[Arm, Summary]:
        return {a: EWStat(mean=t, count=5) for a, t in seconds.items()}

    one, five = arm("suffix", 1), arm("suffix", 5)
    smaller = stats({OFF: 0.019, one: 0.020, five: 0.024})
    here = stats({five: 0.026})
    floor = relative_cost_floor(here, smaller)
    assert OptimisticCosts({five: 0.026}).seconds(one) == pytest.approx(0.026 * 2 / 6)
    assert floor(one) == pytest.approx(0.9 * 0.020)
    assert OptimisticCosts({five: 0.026}, floor).seconds(one) == pytest.approx(0.9 * 0.020)
    assert floor(arm("suffix", 3)) == pytest.approx(0.9 * (0.020 + 0.5 * 0.002))  # its bound there


def test_a_smaller_batch_bounds_a_cheaper_arm_measured_here_from_above() -> None:
    """K = 0 cost half of K = 1 at the smaller batch, so here it costs at most half of K = 1's
    robust figure, whatever its one step read; a K measured only once here is no reference."""

    def robust(times: list[float]) -> RobustStat:
        stat = RobustStat()
        for t in times:
            stat.update(t)
        return stat

    one, four = arm("ngram", 1), arm("ngram", 4)
    smaller = {OFF: robust([0.010] * 8), one: robust([0.020] * 3), four: robust([0.030])}
    here = {OFF: robust([0.019]), one: robust([0.022] * 6), four: robust([0.050])}
    ceiling = relative_cost_ceiling(here, smaller)
    assert ceiling(OFF) == pytest.approx(0.022 * 0.010 / 0.020)  # not K = 4's 0.050 * 1/3: one step
    assert ceiling(arm("ngram", 1)) is None  # no larger arm measured robustly here
    assert ceiling(arm("suffix", 1)) is None  # not measured at the smaller batch
    assert relative_cost_ceiling(here, {arm("ngram", 1): robust([0.020])})(OFF) is None
