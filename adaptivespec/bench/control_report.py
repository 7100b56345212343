"""What `bench control` reports: the learning figures of a simulator run, and the table it prints."""

from __future__ import annotations

from typing import Any

from adaptivespec.bench import learning_metrics as metrics
from adaptivespec.bench.oracle import ORACLE_ARMS, PolicyReport, crossover
from adaptivespec.sim.loop import PhaseResult
from adaptivespec.sim.workload import Workload


def _sweep(raw: dict[str, list[PhaseResult]]) -> dict[int, list[PhaseResult]]:
    return {k: raw[f"k{k}"] for k in ORACLE_ARMS}


def learning(
    raw: dict[str, list[PhaseResult]], workload: Workload, reports: dict[str, PolicyReport], warm: bool
) -> dict[str, Any]:
    sweep = _sweep(raw)
    oracle = metrics.oracle_trace(sweep, metrics.best_k_by_phase(sweep))
    extra: dict[str, Any] = {
        "learned_threshold": crossover(reports["adaptive"].k_by_bucket),
        "warm_start": warm,
        "first_1000_steps_ratio_to_oracle": metrics.first_steps_ratio(raw["adaptive"], oracle),
    }
    if workload.drift:
        last = max(d.at_step for d in workload.drift)
        extra["drift_recovery_steps"] = metrics.drift_recovery_steps(raw["adaptive"], sweep, last)
    return extra


def sample_efficiency(raw: dict[str, list[PhaseResult]]) -> dict[str, float]:
    sweep = _sweep(raw)
    oracle = metrics.oracle_trace(sweep, metrics.best_k_by_phase(sweep))
    ours = metrics.mean_steps_to_95(raw["adaptive"], oracle)
    plain = metrics.mean_steps_to_95(raw["plain-ucb"], oracle)
    return {
        "adaptive_steps_to_95": ours,
        "plain_ucb_steps_to_95": plain,
        "plain_over_adaptive": plain / max(ours, 1.0),
    }


def print_table(report: dict[str, Any]) -> None:
    oracle = report["oracle"]
    print(f"oracle K by bucket: {oracle['k_by_bucket']}  threshold: {oracle['threshold']}")
    adaptive = report["policies"]["adaptive"]
    print(f"adaptive K by bucket: {adaptive['k_by_bucket']}  threshold: {adaptive['learned_threshold']}")
    print(
        f"{'policy':<14} {'goodput tok/s':>14} {'ratio to oracle':>16} {'95% interval':>15} "
        f"{'p50 ITL ms':>11} {'p99 ITL ms':>11}"
    )
    for name, r in report["policies"].items():
        interval = "{:>7.3f}-{:<7.3f}".format(*r["ratio_ci"]) if "ratio_ci" in r else f"{'':15}"
        print(
            f"{name:<14} {r['goodput_tok_s']:>14.0f} {r['ratio_to_oracle']:>16.3f} {interval} "
            f"{r['p50_itl_ms']:>11.2f} {r['p99_itl_ms']:>11.2f}"
        )
    efficiency = report["sample_efficiency"]
    print(
        f"steps to 0.95 of the oracle per bucket: adaptive {efficiency['adaptive_steps_to_95']:.1f}, "
        f"plain river UCB {efficiency['plain_ucb_steps_to_95']:.1f}"
    )
    if "comparisons" in report:
        c = report["comparisons"]
        print(
            f"adaptive - {c['best_static']} (best static): {_interval(c['adaptive_minus_best_static'])}; "
            f"adaptive - off: {_interval(c['adaptive_minus_off'])}; holds: {c['holds']} "
            f"(from {c['first_holds_at_steps_per_bucket']} steps per bucket); "
            f"inconclusive: {report['inconclusive']}; point estimates: adaptive >= best static - 1%: "
            f"{c['adaptive_ge_best_static']}, >= off: {c['adaptive_ge_off']}"
        )
        print(f"exploration: {adaptive['exploration']}")
        spread = report["same_configuration_spread"]
        print(
            f"one configuration measured {spread['median']:.2f}x apart (median over buckets; worst "
            f"{spread['worst']:.2f}x): policies closer than that are within this machine's noise"
        )
        if "adaptive_minus_cross_fitted_best_static" in c:
            print(
                f"adaptive - the best static chosen on the other repeats "
                f"({', '.join(c['cross_fitted_best_static'])}, by repeat): "
                f"{c['adaptive_minus_cross_fitted_best_static']:+.3f}; adaptive >= it - 1%: "
                f"{c['adaptive_ge_cross_fitted_best_static']}"
            )
        if "ratio_to_cross_fitted_oracle" in adaptive:
            point, low, high = adaptive["ratio_to_cross_fitted_oracle"]
            print(f"adaptive against the cross-fitted oracle: {point:.3f} [{low:.3f}, {high:.3f}]")
    if "unlevelled" in report:
        raw = report["unlevelled"]
        spread, c = raw["same_configuration_spread"], raw["comparisons"]
        print(
            f"as measured, before each segment was set to the machine's typical pace: adaptive "
            f"{raw['ratio_to_oracle']['adaptive']:.3f} of the oracle, - {c['best_static']} "
            f"{_interval(c['adaptive_minus_best_static'])}; one configuration {spread['median']:.2f}x "
            f"apart (worst {spread['worst']:.2f}x)"
        )
    for key in ("drift_recovery_steps", "first_1000_steps_ratio_to_oracle"):
        if key in adaptive:
            print(f"{key}: {adaptive[key]}")


def _interval(values: list[float]) -> str:
    point, low, high = values
    return f"{point:+.3f} [{low:+.3f}, {high:+.3f}]"
