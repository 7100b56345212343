import numpy as np
import pytest

from adaptivespec.controller.stall_tail import LEVEL_WINDOW, MIN_LEVEL, MIN_RATIOS, PRIOR_TAIL, StallTail


def test_the_tail_is_the_prior_until_the_machine_is_measured() -> None:
    tail = StallTail()
    for _ in range(MIN_RATIOS - 1):
        tail.observe(0.010, 0.010)
    assert tail.tail == PRIOR_TAIL


@pytest.mark.parametrize(("share", "low", "high"), [(0.0, 0.0, 0.1), (0.2, 2.0, 5.0)])
def test_a_quiet_machine_has_a_thin_tail_and_a_shared_one_a_heavy_one(
    share: float, low: float, high: float
) -> None:
    """Steps with 3% jitter; `share` of them stalled 3-6x. The 90th percentile sees the stalls
    once they are more than a tenth of the steps."""
    rng = np.random.default_rng(0)
    tail = StallTail()
    for _ in range(256):
        seconds = 0.010 * (1 + 0.03 * rng.standard_normal())
        if rng.random() < share:
            seconds *= rng.uniform(3, 6)
        tail.observe(float(seconds), 0.010)
    assert low <= tail.tail <= high


def test_the_level_is_the_median_of_the_last_steps_and_one_before_them() -> None:
    """Until a few steps are measured a step is taken at its word (level 1); then the level is
    the median of the last LEVEL_WINDOW ratios, so a busy spell shows at once and passes."""
    machine = StallTail()
    for _ in range(MIN_LEVEL - 1):
        machine.observe(0.020, 0.010)
    assert machine.level == 1.0
    for _ in range(LEVEL_WINDOW):
        machine.observe(0.012, 0.010)
    machine.observe(0.050, 0.010)  # one stall does not move a median
    assert machine.level == pytest.approx(1.2)
    for _ in range(LEVEL_WINDOW):
        machine.observe(0.010, 0.010)
    assert machine.level == pytest.approx(1.0)
