import pytest

from adaptivespec.controller.arm_prices import LINE_SAMPLES, ArmPrices
from adaptivespec.controller.arms import Arm, arm
from adaptivespec.controller.robust_stat import RobustStat
from adaptivespec.controller.step_costs import PRIOR_SLOPE

ARMS = tuple(arm("draft", k) for k in (0, 1, 2, 3, 4))
TOKENS = {a: 1.0 + 0.6 * a.k for a in ARMS}  # enough to price; the shape does not matter here


def _on(times: dict[int, RobustStat]) -> dict[Arm, RobustStat]:
    """Step times by K, as one drafter's arms."""
    return {arm("draft", k): stat for k, stat in times.items()}


def _stat(seconds: float, steps: int) -> RobustStat:
    stat = RobustStat()
    for _ in range(steps):
        stat.update(seconds)
    return stat


def _prices(times: dict[int, RobustStat], tail: float = 0.1) -> ArmPrices:
    return ArmPrices.of(ARMS, _on(times), TOKENS, scale=1.0, window=19.0, tail=tail)


def test_an_arm_measured_once_on_a_stalled_step_is_priced_near_its_neighbours_line() -> None:
    """t = 10 ms + 2 ms per draft token; K = 2's one step stalled at 4x."""
    times = {1: _stat(0.012, 20), 2: _stat(0.056, 1), 3: _stat(0.016, 20), 4: _stat(0.018, 20)}
    prices = _prices(times)
    expected = (1 * 0.056 + LINE_SAMPLES * 0.014) / (1 + LINE_SAMPLES)
    assert abs(prices.seconds[ARMS[2]] - expected) < 1e-9
    assert prices.support[ARMS[2]] == 1 + LINE_SAMPLES


def test_a_line_through_arms_measured_once_counts_for_no_more_steps_than_they_are() -> None:
    """Three arms measured once each: each one's line is two steps of evidence, so none stands
    on the 4 steps an arm needs to be judged (and ruled out at larger batches, pruning.py).
    Counted as 4, three steps in all could rule an arm out at every larger batch."""
    prices = _prices({1: _stat(0.012, 1), 2: _stat(0.014, 1), 3: _stat(0.016, 1)})
    assert all(prices.support[ARMS[k]] == 1 + 2 for k in (1, 2, 3))
    assert _prices({1: _stat(0.012, 3), 2: _stat(0.014, 1), 3: _stat(0.016, 1)}).support[ARMS[2]] == 5


def test_the_line_never_makes_an_arm_dearer_than_its_own_steps() -> None:
    """K = 4's neighbours include a stalled single step, which tilts the line up."""
    times = {1: _stat(0.012, 20), 2: _stat(0.014, 20), 3: _stat(0.064, 1), 4: _stat(0.018, 6)}
    assert _prices(times).seconds[ARMS[4]] == 0.018


def test_well_measured_arms_keep_nearly_their_own_figure_and_k0_its_own() -> None:
    times = {0: _stat(0.020, 3), 1: _stat(0.012, 20), 2: _stat(0.013, 20), 3: _stat(0.016, 20)}
    prices = _prices(times)
    assert prices.seconds[ARMS[0]] == 0.020  # a plain step: no drafter, no line
    assert abs(prices.seconds[ARMS[2]] / 0.013 - 1) < 0.01


def test_a_noisy_machine_leaves_an_arm_measured_once_in_the_running() -> None:
    """Its upper bound is widened by the stall tail, and is never below the cost model's bound."""
    times = {1: _stat(0.012, 20), 2: _stat(0.040, 1)}
    quiet, noisy = _prices(times, tail=0.1), _prices(times, tail=2.0)
    quiet_bounds = quiet.optimistic(quiet.predicted())
    noisy_bounds = noisy.optimistic(noisy.predicted())
    assert noisy_bounds[ARMS[2]] > quiet_bounds[ARMS[2]]
    # no cheaper than K = 1 plus half the prior slope (step_costs.py), at best
    assert noisy_bounds[ARMS[2]] >= TOKENS[ARMS[2]] / (0.012 * (1 + 0.5 * PRIOR_SLOPE))


def test_a_neighbour_of_the_decision_measured_once_gets_a_second_look_on_a_machine_that_stalls() -> None:
    """K = 2 decided on many steps; K = 1 and K = 0 each read once, both stalled (about 2.5x
    and 4x). K = 1, next to the decision, is bounded no lower than the cost model bounds it
    unmeasured (about K = 2's step, at best), so it runs again; K = 0, two away, is
    taken at its word. A deterministic clock (tail 0) takes both at their word."""
    times = {0: _stat(0.040, 1), 1: _stat(0.030, 1), 2: _stat(0.014, 20)}
    decided, neighbour, two_away = ARMS[2], ARMS[1], ARMS[0]
    stalling, exact = _prices(times, tail=0.1), _prices(times, tail=0.0)
    bounds = stalling.optimistic(stalling.predicted(), None, "draft", decided)
    exact_bounds = exact.optimistic(exact.predicted(), None, "draft", decided)
    at_best = TOKENS[neighbour] / (0.014 * (1 + 0.5 * PRIOR_SLOPE))  # step_costs.py
    assert bounds[neighbour] >= at_best > 1.9 * exact_bounds[neighbour]
    assert exact_bounds[neighbour] == pytest.approx(TOKENS[neighbour] / 0.030 * 1.04)
    assert bounds[two_away] == pytest.approx(TOKENS[two_away] / 0.040 * 1.1)  # its tail only


def test_another_drafters_arms_draw_no_line_and_bound_nothing() -> None:
    """A dear draft model beside cheap prompt lookup: lookup's once-stalled K = 2 is shrunk
    towards lookup's own line only, and an unmeasured draft-model arm is bounded by the
    draft model's own measurements (and by OFF), never by lookup's cheaper steps."""
    lookup = {arm("ngram", k): _stat(0.010 + 0.001 * k, 20) for k in (1, 3, 4)}
    lookup[arm("ngram", 2)] = _stat(0.040, 1)
    model = {arm("draft", 1): _stat(0.030, 20)}
    arms = (arm("", 0), *lookup, *model, arm("draft", 4))
    tokens = {a: 1.0 + 0.6 * a.k for a in arms}
    prices = ArmPrices.of(arms, lookup | model, tokens, scale=1.0, window=19.0, tail=0.1)
    expected = (1 * 0.040 + LINE_SAMPLES * 0.012) / (1 + LINE_SAMPLES)
    assert abs(prices.seconds[arm("ngram", 2)] - expected) < 1e-9
    assert prices.seconds[arm("draft", 1)] == pytest.approx(0.030)  # one arm of its own: no line
    bounds = prices.optimistic(prices.predicted())
    # Beyond its one measured arm the draft model's bound rises from 30 ms, not from lookup's 10-14 ms.
    assert bounds[arm("draft", 4)] <= tokens[arm("draft", 4)] / 0.030
    assert bounds[arm("draft", 4)] < tokens[arm("draft", 4)] / 0.014
    # OFF was never measured: the lowest bound either chain gives it (lookup's: 11 ms / 2).
    assert bounds[arm("", 0)] > 1.0 / 0.011


def test_the_decision_carries_its_drafters_hope_against_another_drafter_only() -> None:
    """A draft model decided on a few rows (it may yet keep 15% more) against prompt lookup
    measured on many (2% more): with a rival priced, the decision's bound takes its own hope,
    so the rival's never outbids it for good; the decision's other K do not (they share its
    curve), and with one drafter alone nothing changes."""
    model = {arm("draft", k): _stat(0.020, 20) for k in (1, 2)}
    lookup = {arm("ngram", 2): _stat(0.020, 20)}
    arms = (*model, *lookup)
    tokens = {a: 2.0 for a in arms}
    hoped = {a: 2.3 if a.method == "draft" else 2.04 for a in arms}
    prices = ArmPrices.of(arms, model | lookup, tokens, scale=1.0, window=19.0, tail=0.1, hoped=hoped)
    predicted = prices.predicted()
    plain = prices.optimistic(predicted, None, "draft")
    standing = prices.optimistic(predicted, None, "draft", arm("draft", 2))
    assert standing[arm("draft", 2)] == pytest.approx(plain[arm("draft", 2)] * 2.3 / 2.0)
    assert standing[arm("draft", 2)] > standing[arm("ngram", 2)] > plain[arm("draft", 2)]
    assert standing[arm("draft", 1)] == plain[arm("draft", 1)]
    alone = ArmPrices.of(tuple(model), model, tokens, scale=1.0, window=19.0, tail=0.1, hoped=hoped)
    assert alone.optimistic(alone.predicted(), None, "draft", arm("draft", 2)) == alone.optimistic(
        alone.predicted(), None, "draft"
    )


def test_the_next_k_past_the_decision_is_bounded_with_what_its_last_position_may_keep() -> None:
    """One drafter, K = 1 decided on many rows, K = 2's second position measured on few: K = 2,
    run twice here, is bounded with the hope its curve carries beyond the decision's (2.6 / 2.0
    over 2.1 / 2.0), K = 3 beyond it is not (single-peaked goodput: K = 2 is tried first, and
    measures it), and once K = 2 stands on the steps that judge an arm, neither is."""
    arms = tuple(arm("draft", k) for k in (1, 2, 3))
    times = {a: _stat(0.010 + 0.002 * a.k, 2 if a.k == 2 else 20) for a in arms}
    tokens = {arm("draft", 1): 2.0, arm("draft", 2): 2.0, arm("draft", 3): 2.0}
    hoped = {arm("draft", 1): 2.1, arm("draft", 2): 2.6, arm("draft", 3): 3.0}
    prices = ArmPrices.of(arms, times, tokens, scale=1.0, window=19.0, tail=0.1, hoped=hoped)
    predicted = prices.predicted()
    bounds = prices.optimistic(predicted, None, "draft", arm("draft", 1))
    own = {a: bounds[a] / predicted[a] for a in arms}  # every arm has the same relative error
    assert own[arm("draft", 2)] == pytest.approx(own[arm("draft", 1)] * (2.6 / 2.0) / (2.1 / 2.0))
    assert own[arm("draft", 3)] == pytest.approx(own[arm("draft", 1)])
    times[arm("draft", 2)] = _stat(0.014, 4)
    judged = ArmPrices.of(arms, times, tokens, scale=1.0, window=19.0, tail=0.1, hoped=hoped)
    bounds = judged.optimistic(judged.predicted(), None, "draft", arm("draft", 1))
    assert bounds[arm("draft", 2)] / judged.predicted()[arm("draft", 2)] == pytest.approx(
        own[arm("draft", 1)]
    )


def test_with_the_decision_off_the_first_drafting_arm_keeps_what_its_first_draft_may_keep() -> None:
    """One drafter measured on a few unlucky rows (its first draft may yet keep 15% more), K = 1
    and 2 each judged on 4 steps, speculation off decided on many: a step at off measures no
    draft, so K = 1, the next arm past off, keeps its hope however many steps it ran, and is run
    again; K = 2 beyond it does not (it shares K = 1's curve), and with K = 1 decided, neither."""
    off, k1, k2 = arm("", 0), arm("draft", 1), arm("draft", 2)
    arms = (off, k1, k2)
    times = {off: _stat(0.0078, 20), k1: _stat(0.0115, 4), k2: _stat(0.0150, 4)}
    tokens = {off: 1.0, k1: 1.43, k2: 1.68}
    hoped = {off: 1.0, k1: 1.43 * 1.15, k2: 1.68 * 1.15}
    prices = ArmPrices.of(arms, times, tokens, scale=1.0, window=19.0, tail=0.1, hoped=hoped)
    predicted = prices.predicted()
    assert predicted[k1] < predicted[off]  # the unlucky rows price K = 1 below off
    plain = prices.optimistic(predicted, None, "draft")
    at_off = prices.optimistic(predicted, None, "draft", off)
    at_k1 = prices.optimistic(predicted, None, "draft", k1)
    assert at_off[k1] == pytest.approx(plain[k1] * 1.15)
    assert at_off[k1] > at_off[off] > plain[k1]  # K = 1 is run again, and its rows measured
    assert at_off[k2] == plain[k2] == at_k1[k2] and at_k1[k1] == plain[k1]
