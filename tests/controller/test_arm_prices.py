from adaptivespec.controller.arm_prices import LINE_SAMPLES, ArmPrices
from adaptivespec.controller.robust_stat import RobustStat
from adaptivespec.controller.step_costs import PRIOR_SLOPE

ARMS = (0, 1, 2, 3, 4)
TOKENS = {k: 1.0 + 0.6 * k for k in ARMS}  # enough to price; the shape does not matter here


def _stat(seconds: float, steps: int) -> RobustStat:
    stat = RobustStat()
    for _ in range(steps):
        stat.update(seconds)
    return stat


def _prices(times: dict[int, RobustStat], tail: float = 0.1) -> ArmPrices:
    return ArmPrices.of(ARMS, times, TOKENS, scale=1.0, window=19.0, tail=tail)


def test_an_arm_measured_once_on_a_stalled_step_is_priced_near_its_neighbours_line() -> None:
    """t = 10 ms + 2 ms per draft token; K = 2's one step stalled at 4x."""
    times = {1: _stat(0.012, 20), 2: _stat(0.056, 1), 3: _stat(0.016, 20), 4: _stat(0.018, 20)}
    prices = _prices(times)
    expected = (1 * 0.056 + LINE_SAMPLES * 0.014) / (1 + LINE_SAMPLES)
    assert abs(prices.seconds[2] - expected) < 1e-9
    assert prices.support[2] == 1 + LINE_SAMPLES


def test_the_line_never_makes_an_arm_dearer_than_its_own_steps() -> None:
    """K = 4's neighbours include a stalled single step, which tilts the line up."""
    times = {1: _stat(0.012, 20), 2: _stat(0.014, 20), 3: _stat(0.064, 1), 4: _stat(0.018, 6)}
    assert _prices(times).seconds[4] == 0.018


def test_well_measured_arms_keep_nearly_their_own_figure_and_k0_its_own() -> None:
    times = {0: _stat(0.020, 3), 1: _stat(0.012, 20), 2: _stat(0.013, 20), 3: _stat(0.016, 20)}
    prices = _prices(times)
    assert prices.seconds[0] == 0.020  # a plain step: no drafter, no line
    assert abs(prices.seconds[2] / 0.013 - 1) < 0.01


def test_a_noisy_machine_leaves_an_arm_measured_once_in_the_running() -> None:
    """Its upper bound is widened by the stall tail, and is never below the cost model's bound."""
    times = {1: _stat(0.012, 20), 2: _stat(0.040, 1)}
    quiet, noisy = _prices(times, tail=0.1), _prices(times, tail=2.0)
    quiet_bounds = quiet.optimistic(quiet.predicted())
    noisy_bounds = noisy.optimistic(noisy.predicted())
    assert noisy_bounds[2] > quiet_bounds[2]
    # no cheaper than K = 1 plus half the prior slope (step_costs.py), at best
    assert noisy_bounds[2] >= TOKENS[2] / (0.012 * (1 + 0.5 * PRIOR_SLOPE))
