import os
import time

import pytest

from adaptivespec.bench.background_load import BackgroundLoad


def _cpu_seconds_of_children() -> float:
    times = os.times()
    return times.children_user + times.children_system


def test_background_load_runs_busy_workers_and_stops_them() -> None:
    with BackgroundLoad(2) as load:
        assert load.running == 2
        time.sleep(1.5)
        assert load.running == 2
    assert load.running == 0


def test_background_load_workers_keep_a_core_busy() -> None:
    """A worker's CPU time comes back to the parent once it is joined: about its wall time."""
    before = _cpu_seconds_of_children()
    with BackgroundLoad(1):
        time.sleep(2.0)
    busy = _cpu_seconds_of_children() - before
    assert busy > 0.5  # a steady load, not an idle process (start-up takes part of the 2 s)


def test_no_background_load_is_free() -> None:
    with BackgroundLoad(0) as load:
        assert load.running == 0


def test_a_negative_load_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        BackgroundLoad(-1)
