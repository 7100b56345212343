"""How fast a learner gets close to the oracle, after a cold start, a drift, or a warm restart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from adaptivespec.sim.loop import PhaseResult

WINDOW = 100  # steps of rolling goodput


def _trace(results: Sequence[PhaseResult]) -> np.ndarray:
    return np.concatenate([np.asarray(r.goodput_trace) for r in results])


def oracle_trace(sweep: Mapping[int, Sequence[PhaseResult]], best_k_by_phase: Sequence[int]) -> np.ndarray:
    """Per-step goodput of the oracle: each phase taken from the sweep run of its best K."""
    return np.concatenate([np.asarray(sweep[k][i].goodput_trace) for i, k in enumerate(best_k_by_phase)])


def best_k_by_phase(sweep: Mapping[int, Sequence[PhaseResult]]) -> list[int]:
    phases = len(next(iter(sweep.values())))
    return [_best_at(sweep, i) for i in range(phases)]


def _best_at(sweep: Mapping[int, Sequence[PhaseResult]], phase: int) -> int:
    return max(sweep, key=lambda k: sweep[k][phase].goodput)


def _rolling(trace: np.ndarray, window: int = WINDOW) -> np.ndarray:
    if trace.size < window:
        return np.full(1, trace.mean() if trace.size else 0.0)
    kernel = np.ones(window) / window
    return np.convolve(trace, kernel, mode="valid")  # rolling[t] = mean(trace[t : t + WINDOW])


def steps_to_reach(trace: np.ndarray, target: float, start: int = 0, window: int = WINDOW) -> int:
    """Steps after `start` until the rolling goodput first reaches `target` (len if never)."""
    rolling = _rolling(trace[start:], window)
    hits = np.flatnonzero(rolling >= target)
    return int(hits[0]) if hits.size else int(trace.size - start)


def steps_to_match(
    trace: np.ndarray, oracle: np.ndarray, fraction: float = 0.95, window: int = WINDOW
) -> int:
    """Steps until the rolling goodput first reaches `fraction` of the oracle's over the same steps.

    Paired, not against the oracle's mean over the whole phase: the simulator gives both the
    same acceptance draws step by step (common random numbers), so the workload's own swings
    cancel. Against the phase mean, a stretch of unlucky draws keeps even the oracle itself
    below 0.95 for a while, and a learner that nearly always ran the oracle's K was charged
    for it.
    """
    ours, theirs = _rolling(trace, window), _rolling(oracle, window)
    hits = np.flatnonzero(ours >= fraction * theirs)
    return int(hits[0]) if hits.size else int(trace.size)


def mean_steps_to_95(learner: Sequence[PhaseResult], oracle: np.ndarray) -> float:
    """Mean over phases of the steps a learner needs to reach 0.95 of the oracle's goodput there."""
    trace = _trace(learner)
    steps, offset = [], 0
    for phase in learner:
        end = offset + phase.steps
        steps.append(steps_to_match(trace[offset:end], oracle[offset:end]))
        offset = end
    return float(np.mean(steps))


def drift_recovery_steps(
    learner: Sequence[PhaseResult], sweep: Mapping[int, Sequence[PhaseResult]], drift_step: int
) -> int:
    """Steps after the drift until rolling goodput is back to 0.95 of the best K after the drift."""
    trace = _trace(learner)
    phase_end = 0
    for phase in learner:
        phase_end += phase.steps
        if phase_end > drift_step:
            break
    best_after = max(float(_trace(results)[drift_step:phase_end].mean()) for results in sweep.values())
    return steps_to_reach(trace[:phase_end], 0.95 * best_after, start=drift_step)


def first_steps_ratio(learner: Sequence[PhaseResult], oracle: np.ndarray, steps: int = 1000) -> float:
    trace = _trace(learner)[:steps]
    return float(trace.mean() / oracle[: trace.size].mean())
