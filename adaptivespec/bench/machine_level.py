"""Segments set to the machine's typical pace, so that a busy spell is not charged to a contender.

On a shared machine the pace moves in spells: every step runs a few tenths slower for a
second or so, then recovers (docs/results.md, the trace of `bench control` on a loaded Xeon).
A spell that lasts about one segment falls on whichever contender runs then, and the
interleaving spreads spells evenly only over many more repeats than a run has. So every
segment begins with the same reference (plain steps over its own rows, `HFLoop._pace`), and
here each segment's seconds are scaled by the bucket's median reference over the segment's
own: a segment that began in a spell 30% slow counts 30% faster. Every contender, the oracle's
sweep included, is scaled by the same rule, and the figures stay in tokens per second of the
machine's typical pace. What the scaling cannot see is a spell that starts or ends inside a
segment; the reference is read before the segment, so a contender that slowed the machine
itself would not be excused by it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from adaptivespec.bench.interleaved import Measurement
from adaptivespec.sim.loop import PhaseResult


def levelled(measurement: Measurement) -> Measurement:
    """A copy of `measurement` whose every segment runs at its bucket's median pace; the
    measurement itself when some segment has no reference (a run without one)."""
    segments = measurement.segments
    phases = len(measurement.concurrency)
    if any(len(result.levels) != 1 for runs in segments.values() for phase in runs for result in phase):
        return measurement
    typical = [
        float(np.median([result.levels[0] for runs in segments.values() for result in runs[p]]))
        for p in range(phases)
    ]
    scaled = {
        name: [[_at_pace(result, typical[p]) for result in runs[p]] for p in range(phases)]
        for name, runs in segments.items()
    }
    return Measurement(measurement.concurrency, measurement.segment_steps, scaled)


def _at_pace(result: PhaseResult, typical: float) -> PhaseResult:
    factor = typical / result.levels[0]
    return replace(
        result,
        seconds=result.seconds * factor,
        itl_seconds=[seconds * factor for seconds in result.itl_seconds],
        goodput_trace=[goodput / factor for goodput in result.goodput_trace],
    )
