"""`bench control --backend hf`: every policy on the real engine, interleaved, against a measured oracle.

The oracle of a bucket is the best fixed arm (drafter and K) measured there, with everything that
ran that arm pooled: the sweep's arm and every static policy whose table gives it in the bucket.
Pooling matters: "off", k0 and both thresholds all run K=0 at large batch, and taking the
best of several noisy measurements of one configuration would credit the oracle with its
luckiest one (the winner's curse), so that nothing, that configuration included, could reach
it. A learner that beats the pooled oracle beyond the interval means the run could not tell
the policies apart (`inconclusive`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from adaptivespec.bench.cross_fit import cross_fitted_rival, repeat_ratios
from adaptivespec.bench.interleaved import Contender, Measurement, merge, totals
from adaptivespec.bench.learning_metrics import steps_to_reach
from adaptivespec.bench.lineup import Lineup
from adaptivespec.bench.oracle import PolicyReport, baseline_policies, crossover, summarise
from adaptivespec.bench.paired import Interval, PairedRatios
from adaptivespec.controller.arms import Arm, arm
from adaptivespec.controller.buckets import BATCH_BUCKETS, batch_bucket
from adaptivespec.sim.loop import PhaseResult

LEARNING_WINDOW = 10  # steps of rolling goodput when judging how soon a learner is close to the oracle
# The point estimates' order: adaptive must reach every static policy's goodput within this.
POINT_MARGIN = 0.01


@dataclass(frozen=True, slots=True)
class PooledOracle:
    arm_by_phase: list[Arm]
    pooled: list[list[str]]  # per phase, the contenders whose measurements make up the oracle
    tokens: np.ndarray  # [phase, repeat]
    seconds: np.ndarray  # [phase, repeat]
    phases: list[PhaseResult]  # per phase, everything pooled

    @classmethod
    def of(cls, measurement: Measurement, contenders: Sequence[Contender], first: str = "") -> PooledOracle:
        """`first`: the drafter a policy that names none runs."""
        ks, pooled, results = [], [], []
        for p, batch in enumerate(measurement.concurrency):
            groups = _fixed_groups(contenders, batch, first)
            goodput = {
                k: merge([s for n in names for s in measurement.segments[n][p]]).goodput
                for k, names in groups.items()
            }
            best = max(goodput, key=goodput.__getitem__)
            ks.append(best)
            pooled.append(groups[best])
            results.append(merge([s for n in groups[best] for s in measurement.segments[n][p]]))
        tokens = np.zeros((len(ks), measurement.repeats))
        seconds = np.zeros_like(tokens)
        for p, names in enumerate(pooled):
            t, s = totals(measurement, names)  # [contender, phase, repeat]
            tokens[p], seconds[p] = t[:, p].sum(axis=0), s[:, p].sum(axis=0)
        return cls(ks, pooled, tokens, seconds, results)

    def ratios(
        self, measurement: Measurement, names: Sequence[str], repeats: int | None = None
    ) -> PairedRatios:
        tokens, seconds = totals(measurement, names)
        r = repeats or measurement.repeats
        return PairedRatios(tokens[..., :r], seconds[..., :r], self.tokens[:, :r], self.seconds[:, :r])


def _fixed_groups(contenders: Sequence[Contender], batch: int, first: str) -> dict[Arm, list[str]]:
    """The fixed contenders by the arm they run at this batch size: each group is one configuration."""
    groups: dict[Arm, list[str]] = {}
    for c in contenders:
        if c.fixed:
            where = arm(c.policy.method_for(batch, 0) or first, c.policy.k_for(batch, 0))
            groups.setdefault(where, []).append(c.name)
    return groups


def cross_fitted_oracle(
    measurement: Measurement, contenders: Sequence[Contender], first: str = ""
) -> tuple[np.ndarray, np.ndarray]:
    """The oracle's tokens and seconds [phase, repeat], each repeat scored by the K the *other* repeats chose.

    The pooled oracle picks each bucket's K by the same measurements that then score it, so
    where several K are within noise of one another its figure is the luckiest of them,
    above any K's true goodput. Leaving the scored repeat out of the choice removes that
    bias; what remains is the cost of choosing from noisy measurements, which a learner
    pays too. Needs two repeats or more.
    """
    repeats = measurement.repeats
    if repeats < 2:
        raise ValueError("a cross-fitted oracle needs at least 2 repeats")
    tokens = np.zeros((len(measurement.concurrency), repeats))
    seconds = np.zeros_like(tokens)
    for p, batch in enumerate(measurement.concurrency):
        groups = list(_fixed_groups(contenders, batch, first).values())
        group_tokens = np.zeros((len(groups), repeats))
        group_seconds = np.zeros_like(group_tokens)
        for g, names in enumerate(groups):
            t, s = totals(measurement, names)  # [member, phase, repeat]
            group_tokens[g], group_seconds[g] = t[:, p].sum(axis=0), s[:, p].sum(axis=0)
        for r in range(repeats):
            others = np.arange(repeats) != r
            goodput = group_tokens[:, others].sum(axis=1) / group_seconds[:, others].sum(axis=1)
            chosen = int(np.argmax(goodput))
            tokens[p, r], seconds[p, r] = group_tokens[chosen, r], group_seconds[chosen, r]
    return tokens, seconds


def report(measurement: Measurement, lineup: Lineup) -> dict[str, Any]:
    contenders, first = lineup.contenders, (lineup.methods[0] if lineup.methods else "")
    names = [c.name for c in contenders]
    merged = {name: measurement.merged(name) for name in names}
    summaries = {name: summarise(merged[name]) for name in names}
    oracle = PooledOracle.of(measurement, contenders, first)
    ratios = oracle.ratios(measurement, names)
    labels = [BATCH_BUCKETS[batch_bucket(b)].label for b in measurement.concurrency]
    policies = {
        name: _policy_json(summaries[name], ratios.ratio(i))
        for i, name in enumerate(names)
        if name not in lineup.sweep
    }
    oracle_json = _oracle_json(labels, oracle)
    policies["oracle"] = _policy_json(summarise(oracle.phases), Interval(1.0, 1.0, 1.0))
    policies["oracle"]["goodput_tok_s"] = oracle_json["goodput_tok_s"]
    for name in lineup.learners:  # which arm a learner ran, and how often: its exploration, by bucket
        policies[name]["k_counts_by_bucket"] = {
            label: {str(k): n for k, n in sorted(phase.k_counts.items())}
            for label, phase in zip(labels, merged[name], strict=True)
        }
        policies[name]["arm_counts_by_bucket"] = {
            label: dict(sorted(phase.arm_counts.items()))
            for label, phase in zip(labels, merged[name], strict=True)
        }
    if measurement.repeats >= 2:
        fitted_tokens, fitted_seconds = cross_fitted_oracle(measurement, contenders, first)
        tokens, seconds = totals(measurement, names)
        fitted = PairedRatios(tokens, seconds, fitted_tokens, fitted_seconds)
        for i, name in enumerate(names):
            if name in policies:
                ratio = fitted.ratio(i)
                policies[name]["ratio_to_cross_fitted_oracle"] = [ratio.point, ratio.low, ratio.high]
    policies["adaptive"]["learned_threshold"] = crossover(summaries["adaptive"].k_by_bucket)
    policies["adaptive"]["exploration"] = lineup.controller.exploration()
    learner_lows = [ratios.ratio(names.index(n)).low for n in lineup.learners]
    sweep = {name: _policy_json(summaries[name], ratios.ratio(names.index(name))) for name in lineup.sweep}
    return {
        "buckets": labels,
        "repeats": measurement.repeats,
        "segment_steps": measurement.segment_steps,
        "oracle": oracle_json,
        "policies": policies,
        "sweep": sweep,
        "comparisons": _comparisons(measurement, names, oracle, lineup),
        "cells": _cells(labels, merged),
        "same_configuration_spread": _same_configuration_spread(measurement, contenders, first),
        "inconclusive": any(low > 1.0 for low in learner_lows),
        "sample_efficiency": _sample_efficiency(merged, oracle.phases),
    }


def _cells(labels: list[str], merged: dict[str, list[PhaseResult]]) -> list[dict[str, Any]]:
    """Per bucket, adaptive's goodput over off's: where choosing may have cost."""
    return [
        {"bucket": label, "ratio_to_off": ours.goodput / off.goodput if off.goodput else float("nan")}
        for label, ours, off in zip(labels, merged["adaptive"], merged["off"], strict=True)
    ]


def _same_configuration_spread(
    measurement: Measurement, contenders: Sequence[Contender], first: str
) -> dict[str, float]:
    """How far apart the run measured one configuration: in each bucket, the fixed contenders
    that ran the same K (k0, "off" and a threshold above the batch, say), fastest over
    slowest. Differences between policies smaller than this spread are the machine's, not
    theirs: a run on a busy machine can settle only larger ones."""
    spreads = []
    for p, batch in enumerate(measurement.concurrency):
        for names in _fixed_groups(contenders, batch, first).values():
            goodputs = [merge(measurement.segments[n][p]).goodput for n in names]
            if len(goodputs) > 1 and min(goodputs) > 0:
                spreads.append(max(goodputs) / min(goodputs))
    if not spreads:
        return {"median": 1.0, "worst": 1.0}
    return {"median": float(np.median(spreads)), "worst": float(max(spreads))}


def _oracle_json(labels: list[str], oracle: PooledOracle) -> dict[str, Any]:
    k_by_bucket = {label: a.k for label, a in zip(labels, oracle.arm_by_phase, strict=True)}
    phases = oracle.phases
    # Per pooled run, as if the oracle had run each bucket once like every other contender.
    runs = [len(names) for names in oracle.pooled]
    tokens = sum(p.tokens / n for p, n in zip(phases, runs, strict=True))
    seconds = sum(p.seconds / n for p, n in zip(phases, runs, strict=True))
    return {
        "k_by_bucket": k_by_bucket,
        "method_by_bucket": {label: a.method for label, a in zip(labels, oracle.arm_by_phase, strict=True)},
        "pooled_by_bucket": dict(zip(labels, oracle.pooled, strict=True)),
        "threshold": crossover(k_by_bucket),
        "goodput_tok_s": tokens / seconds,
        "goodput_by_bucket": {label: p.goodput for label, p in zip(labels, phases, strict=True)},
    }


def _policy_json(summary: PolicyReport, ratio: Interval) -> dict[str, Any]:
    return summary.to_json() | {"ratio_to_oracle": ratio.point, "ratio_ci": [ratio.low, ratio.high]}


def _comparisons(
    measurement: Measurement, names: Sequence[str], oracle: PooledOracle, lineup: Lineup
) -> dict[str, Any]:
    """Adaptive against the best static policy (with several drafters, every fixed (drafter, K)
    too) and against "off", and from how many steps on it holds; with several drafters, also
    against the best adaptive policy that runs one drafter alone."""
    statics = list(baseline_policies()) + (list(lineup.sweep) if len(lineup.methods) > 1 else [])
    full = oracle.ratios(measurement, names)
    best = max(statics, key=lambda n: full.ratio(names.index(n)).point)

    def verdict(ratios: PairedRatios) -> tuple[Interval, Interval, bool]:
        ours = names.index("adaptive")
        versus_best = ratios.difference(ours, names.index(best))
        versus_off = ratios.difference(ours, names.index("off"))
        return versus_best, versus_off, versus_best.high >= 0 and versus_off.high >= 0

    versus_best, versus_off, holds = verdict(full)
    holding = [verdict(oracle.ratios(measurement, names, r))[2] for r in range(1, measurement.repeats + 1)]
    first = next((r for r in range(1, len(holding) + 1) if all(holding[r - 1 :])), None)
    # `holds` passes more easily the noisier the run (its intervals widen); the point
    # estimates' order does not.
    ours = full.ratio(names.index("adaptive")).point
    alone = {name: full.ratio(names.index(name)).point for name in lineup.single_drafter_learners}
    single = {}
    if alone:
        best_alone = max(alone, key=alone.__getitem__)
        single = {
            "best_single_drafter_adaptive": best_alone,
            "adaptive_ge_best_single_drafter": ours >= (1 - POINT_MARGIN) * alone[best_alone],
        }
    fitted: dict[str, Any] = {}
    if measurement.repeats >= 2:
        tokens, seconds = totals(measurement, names)
        rivals, picks = cross_fitted_rival(
            tokens, seconds, oracle.tokens, oracle.seconds, [names.index(n) for n in statics]
        )
        mine = repeat_ratios(tokens, seconds, oracle.tokens, oracle.seconds)[names.index("adaptive")]
        bar = (1 - POINT_MARGIN) * np.mean(rivals)
        fitted = {
            "cross_fitted_best_static": [names[i] for i in picks],
            "adaptive_minus_cross_fitted_best_static": float(np.mean(mine - rivals)),
            "adaptive_ge_cross_fitted_best_static": bool(np.mean(mine) >= bar),
        }
    verdicts = {
        "best_static": best,
        "adaptive_minus_best_static": versus_best.to_json(),
        "adaptive_minus_off": versus_off.to_json(),
        "holds": holds,
        "adaptive_ge_best_static": ours >= (1 - POINT_MARGIN) * full.ratio(names.index(best)).point,
        "adaptive_ge_off": ours >= full.ratio(names.index("off")).point,
        "first_holds_at_steps_per_bucket": None if first is None else first * measurement.segment_steps,
    }
    return single | fitted | verdicts


def _sample_efficiency(merged: dict[str, list[PhaseResult]], oracle: list[PhaseResult]) -> dict[str, float]:
    def steps(name: str) -> float:
        reached = [
            steps_to_reach(np.asarray(phase.goodput_trace), 0.95 * best.goodput, window=LEARNING_WINDOW)
            for phase, best in zip(merged[name], oracle, strict=True)
        ]
        return float(np.mean(reached))

    ours, plain = steps("adaptive"), steps("plain-ucb")
    return {
        "adaptive_steps_to_95": ours,
        "plain_ucb_steps_to_95": plain,
        "plain_over_adaptive": plain / max(ours, 1.0),
    }
