"""What `bench fleet` reports: one run's lines, and with `--seeds` the per-host bar judged on
the means over seeds, with a bootstrap bound.

One run's steps to 0.95 of the oracle are a few exploratory steps' luck: at a 10-step window
the lone runs of one scenario spread over 0-123 steps with the seed alone. "Each host in at
most half the steps of a lone host" is then a claim about expectations: for every host h, the
mean over seeds of its steps in the fleet against the mean steps of a lone host (every host's
lone run at every seed). The bound resamples seeds with replacement, fleet and lone runs of a
seed together, so that a bar that holds on the means by luck of a few seeds shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from adaptivespec.bench.fleet_hosts import Database, Host
from adaptivespec.bench.learning_metrics import steps_to_match
from adaptivespec.bench.oracle import Oracle, ratio_to_oracle, summarise
from adaptivespec.sim.loop import PhaseResult

RESAMPLES = 4000
BOUND = 95.0  # percentile of the bootstrap distribution reported as the upper bound


@dataclass(frozen=True, slots=True)
class HostOracle:
    """The best fixed K per bucket on one host's requests, and its per-step goodput there."""

    oracle: Oracle
    targets: list[np.ndarray]  # per load level, in the workload's order: [steps] tokens / s


def learning(lone: list[Host], fleet: list[Host], oracles: list[HostOracle], window: int) -> dict[str, Any]:
    """Each host, lone or in the fleet, against the oracle on its own requests."""
    lone_levels = [_steps_by_level(h.results, h.order, oracles[h.index].targets, window) for h in lone]
    fleet_levels = [_steps_by_level(h.results, h.order, oracles[h.index].targets, window) for h in fleet]
    lone_steps = [float(sum(levels)) for levels in lone_levels]
    fleet_steps = [float(sum(levels)) for levels in fleet_levels]
    fleet_ratios = [ratio_to_oracle(summarise(h.results), oracles[h.index].oracle) for h in fleet]
    return {
        "lone": {
            "steps_to_095": lone_steps[0],
            "ratio_to_oracle": ratio_to_oracle(summarise(lone[0].results), oracles[0].oracle),
        },
        "lone_per_host": {"steps_to_095": lone_steps, "steps_to_095_by_level": lone_levels},
        "fleet": {
            "steps_to_095_per_host": fleet_steps,
            "steps_to_095_by_level": fleet_levels,
            "ratio_to_oracle": float(np.mean(fleet_ratios)),
            "ratio_per_host": fleet_ratios,
        },
        "holds": all(f <= 0.5 * lone_steps[0] for f in fleet_steps),
        # One lone run is one controller seed's luck (at a 10-step window, 12 to 61 steps over
        # four seeds of one scenario); the mean of a lone run per host is a steadier yardstick.
        "holds_against_lone_mean": all(f <= 0.5 * float(np.mean(lone_steps)) for f in fleet_steps),
    }


def database_costs(database: Database, seconds: float) -> dict[str, Any]:
    refresh = database.refresh_ms or [0.0]
    return {
        "db_writes_per_s": len(database.flush_ms) / seconds,
        "db_rows_per_s": database.rows / seconds,
        "flush_latency_ms": _latency(database.flush_ms),
        "refresh_latency_ms": float(np.mean(refresh)),
        "refresh_latency_p99_ms": float(np.percentile(refresh, 99)),
    }


def _steps_by_level(
    results: list[PhaseResult], order: list[int], targets: list[np.ndarray], window: int
) -> list[int]:
    """Steps until the rolling goodput first reaches its target, per load level in the
    workload's order, whatever order the host met them in: where a host's steps went."""
    steps = [0] * len(targets)
    for result, index in zip(results, order, strict=True):
        steps[index] = steps_to_match(np.asarray(result.goodput_trace), targets[index], window=window)
    return steps


def _latency(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"mean": 0.0, "p99": 0.0}
    return {"mean": float(np.mean(samples)), "p99": float(np.percentile(samples, 99))}


def summarise_seeds(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The issue's report keys, each a mean over the seeds' runs, beside the runs themselves."""
    fleet = np.array([r["fleet"]["steps_to_095_per_host"] for r in reports])  # [seeds, hosts]
    lone = np.array([r["lone_per_host"]["steps_to_095"] for r in reports])  # [seeds, hosts]
    ratios = _ratios(fleet, lone)
    upper = np.percentile(_resampled_ratios(fleet, lone), BOUND, axis=0, method="higher")  # a drawn ratio
    return {
        "hosts": int(fleet.shape[1]),
        "seeds": [r["scenario"]["seed"] for r in reports],
        "window": reports[0]["window"],
        "stagger": reports[0]["stagger"],
        "lone": {
            "steps_to_095": float(lone.mean()),
            "ratio_to_oracle": float(np.mean([r["lone"]["ratio_to_oracle"] for r in reports])),
        },
        "fleet": {
            "steps_to_095_per_host": fleet.mean(axis=0).tolist(),
            "ratio_to_oracle": float(np.mean([r["fleet"]["ratio_to_oracle"] for r in reports])),
        },
        "ratio_per_host": ratios.tolist(),  # mean fleet steps of host h / mean steps of a lone host
        "ratio_upper_95": upper.tolist(),
        "holds": bool(np.all(ratios <= 0.5)),
        "holds_at_upper_95": bool(np.all(upper <= 0.5)),
        "runs_holding": sum(bool(r["holds"]) for r in reports),
        "db_writes_per_s": float(np.mean([r["db_writes_per_s"] for r in reports])),
        "refresh_latency_ms": float(np.mean([r["refresh_latency_ms"] for r in reports])),
        "runs": list(reports),
    }


def _ratios(fleet: np.ndarray, lone: np.ndarray) -> np.ndarray:
    """[hosts]: each host's mean steps over a lone host's; a lone host at 0 steps leaves
    nothing to halve, and a fleet host at 0 too then meets the bar (0 <= 0)."""
    lone_mean = float(lone.mean())
    if lone_mean > 0:
        return fleet.mean(axis=0) / lone_mean
    return np.where(fleet.mean(axis=0) > 0, np.inf, 0.0)


def _resampled_ratios(fleet: np.ndarray, lone: np.ndarray) -> np.ndarray:
    """[RESAMPLES, hosts]: the ratios over seeds drawn with replacement (seeded: reproducible)."""
    rng = np.random.default_rng(0)
    picks = rng.integers(0, fleet.shape[0], size=(RESAMPLES, fleet.shape[0]))
    return np.stack([_ratios(fleet[pick], lone[pick]) for pick in picks])


def print_summary(summary: dict[str, Any]) -> None:
    fleet = summary["fleet"]["steps_to_095_per_host"]
    ratios = ", ".join(f"{r:.2f}" for r in summary["ratio_per_host"])
    upper = ", ".join(f"{r:.2f}" for r in summary["ratio_upper_95"])
    runs = len(summary["runs"])
    print(f"over {runs} seeds {summary['seeds']}:")
    print(f"lone host: mean steps to 0.95 {summary['lone']['steps_to_095']:.1f}")
    print(f"fleet: mean steps to 0.95 per host [{', '.join(f'{s:.1f}' for s in fleet)}]")
    print(f"per host / lone: [{ratios}], {BOUND:.0f}th percentile over resampled seeds [{upper}]")
    holds, bound, holding = summary["holds"], summary["holds_at_upper_95"], summary["runs_holding"]
    print(f"each host in at most half a lone host's mean steps: {holds} (at the bound: {bound})")
    print(f"single runs where each host took at most half the first lone run's steps: {holding} of {runs}")


def print_run(report: dict[str, Any]) -> None:
    lone, fleet = report["lone"], report["fleet"]
    steps = ", ".join(f"{s:.0f}" for s in fleet["steps_to_095_per_host"])
    flush = report["flush_latency_ms"]
    print(f"{report['hosts']} hosts ({report['stagger']}), run key {report['run_key']!r}")
    print(f"lone host: steps to 0.95 {lone['steps_to_095']:.0f}, ratio {lone['ratio_to_oracle']:.3f}")
    print(f"fleet: steps to 0.95 per host [{steps}], ratio {fleet['ratio_to_oracle']:.3f}")
    print(f"each host in at most half the lone host's steps: {report['holds']}")
    print(f"... in at most half the mean of the lone runs: {report['holds_against_lone_mean']}")
    writes, rows = report["db_writes_per_s"], report["db_rows_per_s"]
    print(f"database, per virtual second: {writes:.2f} flushes, {rows:.1f} rows")
    print(
        f"flush {flush['mean']:.2f} ms (p99 {flush['p99']:.2f}), "
        f"refresh {report['refresh_latency_ms']:.2f} ms (p99 {report['refresh_latency_p99_ms']:.2f})"
    )
