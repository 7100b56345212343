"""The per-host bar over seeds: means, the bootstrap bound, and the edge where a lone host needs nothing."""

from __future__ import annotations

from typing import Any

import pytest

from adaptivespec.bench.fleet_report import summarise_seeds


def _report(fleet: list[float], lone: list[float], seed: int = 0) -> dict[str, Any]:
    return {
        "scenario": {"seed": seed},
        "window": 10,
        "stagger": "none",
        "lone": {"steps_to_095": lone[0], "ratio_to_oracle": 0.99},
        "lone_per_host": {"steps_to_095": lone},
        "fleet": {"steps_to_095_per_host": fleet, "ratio_to_oracle": 0.995},
        "holds": all(f <= 0.5 * lone[0] for f in fleet),
        "db_writes_per_s": 8.0,
        "refresh_latency_ms": 3.0,
    }


def test_each_host_is_judged_on_its_mean_against_a_lone_hosts_mean() -> None:
    reports = [_report([2, 12], [10, 30], seed=0), _report([4, 0], [20, 20], seed=1)]  # lone mean 20
    summary = summarise_seeds(reports)
    assert summary["fleet"]["steps_to_095_per_host"] == [3.0, 6.0]
    assert summary["lone"]["steps_to_095"] == 20.0
    assert summary["ratio_per_host"] == pytest.approx([0.15, 0.30])
    assert summary["holds"] is True
    assert summary["runs_holding"] == 1  # seed 0's host 1 took 12 > half of its first lone run's 10
    bounds = zip(summary["ratio_upper_95"], summary["ratio_per_host"], strict=True)
    assert all(upper >= ratio for upper, ratio in bounds)
    assert len(summary["runs"]) == 2 and summary["seeds"] == [0, 1]


def test_a_bar_met_on_the_means_by_one_lucky_seed_fails_at_the_bound() -> None:
    lucky = _report([0, 0], [100, 100])
    unlucky = [_report([9, 9], [10, 10], seed) for seed in range(1, 6)]  # each host at 0.9 of a lone host
    summary = summarise_seeds([lucky, *unlucky])
    assert summary["holds"] is True  # 7.5 against half of 25
    assert summary["holds_at_upper_95"] is False


def test_a_lone_host_at_zero_steps_leaves_only_zero_to_meet() -> None:
    met = summarise_seeds([_report([0, 0], [0, 0], seed) for seed in (0, 1)])
    missed = summarise_seeds([_report([0, 1], [0, 0], seed) for seed in (0, 1)])
    assert met["holds"] and met["ratio_per_host"] == [0.0, 0.0]
    assert not missed["holds"] and missed["ratio_per_host"][1] == float("inf")
