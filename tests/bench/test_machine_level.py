"""Segments set to the machine's typical pace (bench/machine_level.py)."""

from __future__ import annotations

import numpy as np
import pytest

from adaptivespec.bench.interleaved import Measurement
from adaptivespec.bench.machine_level import levelled
from adaptivespec.sim.loop import PhaseResult


def _segment(tokens: int, seconds: float, level: float | None) -> PhaseResult:
    result = PhaseResult(2, steps=4, tokens=tokens, seconds=seconds, levels=[] if level is None else [level])
    result.itl_seconds.append(np.full(2, seconds / tokens))
    result.goodput_trace.append(tokens / seconds)
    return result


def test_a_segment_that_began_in_a_busy_spell_counts_at_the_typical_pace() -> None:
    """Two contenders alike (8 tokens a second at the typical pace); one of the first one's
    three segments ran while the machine was 1.5x slow, as its reference shows. Levelled,
    every segment reads the same goodput; as measured, that one read a third less."""
    slow = _segment(8, 1.5, level=0.015)
    first = [slow, _segment(8, 1.0, 0.010), _segment(8, 1.0, 0.010)]
    second = [_segment(8, 1.0, 0.010) for _ in range(3)]
    measurement = Measurement((2,), 4, {"a": [first], "b": [second]})
    at_pace = levelled(measurement)
    for name in ("a", "b"):
        for result in at_pace.segments[name][0]:
            assert result.goodput == pytest.approx(8.0)
            assert result.goodput_trace == [pytest.approx(8.0)]
            assert result.itl_seconds[0] == pytest.approx(np.full(2, 0.125))
    assert slow.seconds == 1.5  # the measurement itself is left as measured
    assert at_pace.segments["a"][0][0].levels == [0.015]


def test_the_typical_pace_is_each_buckets_median_reference() -> None:
    """A bucket whose references all read 1.2x the others keeps its own pace: levelling sets
    segments to their bucket's median, it does not move one bucket's figures to another's."""
    small = [_segment(8, 1.0, 0.010), _segment(8, 1.0, 0.010), _segment(8, 2.0, 0.020)]
    large = [_segment(8, 1.2, 0.012) for _ in range(3)]
    at_pace = levelled(Measurement((1, 8), 4, {"a": [small, large]}))
    assert [r.seconds for r in at_pace.segments["a"][0]] == pytest.approx([1.0, 1.0, 1.0])
    assert [r.seconds for r in at_pace.segments["a"][1]] == pytest.approx([1.2, 1.2, 1.2])


def test_a_run_without_references_is_left_as_measured() -> None:
    measurement = Measurement((2,), 4, {"a": [[_segment(8, 1.0, None), _segment(8, 1.5, 0.01)]]})
    assert levelled(measurement) is measurement
