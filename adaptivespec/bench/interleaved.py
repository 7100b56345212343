"""Interleaved measurement on a real engine: every contender, in alternation, on the same requests.

On a real machine step times drift (other processes, caches, clocks) by more than the
differences between speculation policies. Running one policy's whole schedule after another
puts that drift between policies: identical work measured further apart than the policies
differ. Here each batch bucket is measured in short segments: every repeat runs every
contender once, in an order that rotates from repeat to repeat, on requests seeded by
(bucket, repeat). Drift then falls on every contender alike, and each repeat is a paired
comparison.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from adaptivespec.bench.hf_loop import HFLoop
from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.sim.loop import PhaseResult, StepSink


@dataclass(frozen=True, slots=True)
class Contender:
    name: str
    policy: SpecPolicy
    on_step: StepSink | None = None
    fixed: bool = True  # one configuration per bucket (a fixed K or a static table): an oracle candidate


@dataclass(slots=True)
class Measurement:
    """segments[name][phase][repeat]: one contender's result in one segment."""

    concurrency: tuple[int, ...]  # batch size of each phase
    segment_steps: int
    segments: dict[str, list[list[PhaseResult]]] = field(default_factory=dict)

    @property
    def repeats(self) -> int:
        first = next(iter(self.segments.values()))
        return len(first[0])

    def merged(self, name: str, repeats: int | None = None) -> list[PhaseResult]:
        """One result per phase: the contender's first `repeats` segments there, pooled."""
        return [merge(phase[:repeats]) for phase in self.segments[name]]


def measure(
    loop: HFLoop,
    contenders: Sequence[Contender],
    repeats: int,
    progress: Callable[[int], None] | None = None,
) -> Measurement:
    phases = loop.load
    steps = max(1, phases[0].steps // repeats)
    measurement = Measurement(tuple(p.concurrency for p in phases), steps)
    for c in contenders:
        measurement.segments[c.name] = [[] for _ in phases]
    for index in range(len(phases)):
        loop.warm(index)  # this batch size's shapes, before any contender is timed on them
        for repeat in range(repeats):
            shift = (repeat + index) % len(contenders)
            for c in (*contenders[shift:], *contenders[:shift]):
                result = loop.segment(index, repeat, steps, c.policy, c.on_step)
                measurement.segments[c.name][index].append(result)
                if progress is not None:
                    progress(steps)
    return measurement


def merge(results: Sequence[PhaseResult]) -> PhaseResult:
    merged = PhaseResult(results[0].concurrency)
    for r in results:
        merged.steps += r.steps
        merged.tokens += r.tokens
        merged.seconds += r.seconds
        for k, n in r.k_counts.items():
            merged.k_counts[k] = merged.k_counts.get(k, 0) + n
        for name, n in r.arm_counts.items():
            merged.arm_counts[name] = merged.arm_counts.get(name, 0) + n
        merged.itl_seconds.extend(r.itl_seconds)
        merged.itl_weights.extend(r.itl_weights)
        merged.goodput_trace.extend(r.goodput_trace)
        merged.levels.extend(r.levels)
    return merged


def totals(measurement: Measurement, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """tokens and seconds as arrays [contender, phase, repeat]."""
    tokens = np.array([[[s.tokens for s in phase] for phase in measurement.segments[n]] for n in names])
    seconds = np.array([[[s.seconds for s in phase] for phase in measurement.segments[n]] for n in names])
    return tokens.astype(np.float64), seconds
