"""`bench control`: every policy over the same load schedule, against a per-bucket oracle.

The oracle is an exhaustive sweep: the schedule is run once per fixed K, and each batch
bucket keeps the K with the highest goodput there. Phases start from their own seeded
streams, so a policy that picks the oracle's K in a bucket reproduces its result exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from adaptivespec.controller.buckets import BATCH_BUCKETS, batch_bucket
from adaptivespec.controller.buckets import crossover as keys_crossover
from adaptivespec.controller.learning_settings import ARMS
from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.engine.static_policy import FixedK, StaticTable
from adaptivespec.engine.telemetry import StepTelemetry
from adaptivespec.sim.loop import PhaseResult, weighted_percentile

ORACLE_ARMS = ARMS


class LoadLoop(Protocol):
    """The simulator's loop or the real engine's: same schedule, same telemetry."""

    model_key: str
    hardware_key: str

    def run(
        self,
        policy: SpecPolicy,
        on_step: Callable[[StepTelemetry], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[PhaseResult]: ...


def baseline_policies() -> dict[str, SpecPolicy]:
    """What serving stacks ship today: off, a fixed K, or K=4 below a hand-set batch threshold."""
    return {
        "off": FixedK(0),
        "always-k2": FixedK(2),
        "always-k4": FixedK(4),
        "threshold-16": StaticTable.parse([(1, 15, 4)], default_k=0),
        "threshold-32": StaticTable.parse([(1, 31, 4)], default_k=0),
    }


@dataclass(frozen=True, slots=True)
class PolicyReport:
    goodput_tok_s: float
    goodput_by_bucket: dict[str, float]
    k_by_bucket: dict[str, int]
    p50_itl_ms: float
    p99_itl_ms: float
    ratio_to_oracle: float = float("nan")

    def to_json(self) -> dict[str, object]:
        return {
            "goodput_tok_s": self.goodput_tok_s,
            "ratio_to_oracle": self.ratio_to_oracle,
            "k_by_bucket": self.k_by_bucket,
            "goodput_by_bucket": self.goodput_by_bucket,
            "p50_itl_ms": self.p50_itl_ms,
            "p99_itl_ms": self.p99_itl_ms,
        }


@dataclass(frozen=True, slots=True)
class Oracle:
    k_by_bucket: dict[str, int]
    goodput_by_bucket: dict[str, float]
    goodput_tok_s: float
    threshold: int | None

    def to_json(self) -> dict[str, object]:
        return {
            "k_by_bucket": self.k_by_bucket,
            "threshold": self.threshold,
            "goodput_tok_s": self.goodput_tok_s,
            "goodput_by_bucket": self.goodput_by_bucket,
        }


def _by_bucket(results: Sequence[PhaseResult]) -> dict[str, list[PhaseResult]]:
    grouped: dict[str, list[PhaseResult]] = {}
    for result in results:
        grouped.setdefault(BATCH_BUCKETS[batch_bucket(result.concurrency)].label, []).append(result)
    return grouped


def _goodput(results: Sequence[PhaseResult]) -> float:
    seconds = sum(r.seconds for r in results)
    return sum(r.tokens for r in results) / seconds if seconds else 0.0


def summarise(results: Sequence[PhaseResult]) -> PolicyReport:
    grouped = _by_bucket(results)
    k_counts = {label: _merge_counts([r.k_counts for r in phases]) for label, phases in grouped.items()}
    itl = np.concatenate([a for r in results for a in r.itl_seconds])
    weights = np.concatenate([w for r in results for w in r.itl_weights]).astype(np.float64)
    return PolicyReport(
        goodput_tok_s=_goodput(results),
        goodput_by_bucket={label: _goodput(phases) for label, phases in grouped.items()},
        k_by_bucket={label: max(counts, key=counts.__getitem__) for label, counts in k_counts.items()},
        p50_itl_ms=weighted_percentile(itl, weights, 50) * 1000,
        p99_itl_ms=weighted_percentile(itl, weights, 99) * 1000,
    )


def _merge_counts(counts: Sequence[Mapping[int, int]]) -> dict[int, int]:
    merged: dict[int, int] = {}
    for mapping in counts:
        for k, n in mapping.items():
            merged[k] = merged.get(k, 0) + n
    return merged


def oracle_from_sweep(sweep: Mapping[int, Sequence[PhaseResult]]) -> Oracle:
    """Best K per bucket; phases of the best runs make up the oracle's own schedule."""
    per_arm = {k: _by_bucket(results) for k, results in sweep.items()}
    labels = list(next(iter(per_arm.values())))
    best = {label: _best_arm(per_arm, label) for label in labels}
    phases = [phase for label in labels for phase in per_arm[best[label]][label]]
    return Oracle(
        k_by_bucket=best,
        goodput_by_bucket={label: _goodput(per_arm[best[label]][label]) for label in labels},
        goodput_tok_s=_goodput(phases),
        threshold=crossover(best),
    )


def _best_arm(per_arm: Mapping[int, Mapping[str, Sequence[PhaseResult]]], label: str) -> int:
    return max(per_arm, key=lambda k: _goodput(per_arm[k][label]))


def crossover(k_by_bucket: Mapping[str, int]) -> int | None:
    """Smallest batch size from which every larger bucket's best K is 0; None if there is none."""
    labelled = {b.label: b for b in BATCH_BUCKETS}
    return keys_crossover([(labelled[label], k) for label, k in k_by_bucket.items()])


def ratio_to_oracle(report: PolicyReport, oracle: Oracle) -> float:
    """Mean over buckets of goodput / oracle goodput, so every load level counts equally."""
    ratios = [report.goodput_by_bucket[b] / oracle.goodput_by_bucket[b] for b in oracle.goodput_by_bucket]
    return float(np.mean(ratios))


@dataclass(frozen=True, slots=True)
class Learner:
    """A learning policy: what the loop asks for K, and what it tells about each step."""

    policy: SpecPolicy
    on_step: Callable[[StepTelemetry], None]


def run_control(
    loop: LoadLoop,
    policies: Mapping[str, SpecPolicy],
    progress: Callable[[int], None] | None = None,
    arms: Sequence[int] = ORACLE_ARMS,
    learners: Mapping[str, Callable[[], Learner]] | None = None,
) -> tuple[Oracle, dict[str, PolicyReport], dict[str, list[PhaseResult]]]:
    sweep = {k: loop.run(FixedK(k), progress=progress) for k in arms}
    oracle = oracle_from_sweep(sweep)
    reports: dict[str, PolicyReport] = {}
    raw: dict[str, list[PhaseResult]] = {f"k{k}": results for k, results in sweep.items()}
    for name, policy in policies.items():
        raw[name] = loop.run(policy, progress=progress)
        reports[name] = _with_ratio(summarise(raw[name]), oracle)
    for name, make in (learners or {}).items():
        learner = make()
        raw[name] = loop.run(learner.policy, on_step=learner.on_step, progress=progress)
        reports[name] = _with_ratio(summarise(raw[name]), oracle)
    reports["oracle"] = _with_ratio(
        summarise(
            [p for label in oracle.k_by_bucket for p in _by_bucket(sweep[oracle.k_by_bucket[label]])[label]]
        ),
        oracle,
    )
    return oracle, reports, raw


def _with_ratio(report: PolicyReport, oracle: Oracle) -> PolicyReport:
    return PolicyReport(
        report.goodput_tok_s,
        report.goodput_by_bucket,
        report.k_by_bucket,
        report.p50_itl_ms,
        report.p99_itl_ms,
        ratio_to_oracle(report, oracle),
    )
