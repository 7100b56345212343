import numpy as np
import pytest

from adaptivespec.controller.stall_tail import MIN_RATIOS, PRIOR_TAIL, StallTail


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
