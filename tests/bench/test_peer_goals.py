"""`bench workload`'s verdict against OpenVINO GenAI, on engines' medians as the bench makes them."""

from __future__ import annotations

from typing import Any

import pytest

from adaptivespec.bench.peer_goals import PeerGoals, against_peer, summary_line
from adaptivespec.bench.traffic import Summary, over_rounds


def _engine(
    tok_s: float, tpot_ms: float, concurrency: float, itl_ms: float = 20.0, ttft_ms: float = 200.0
) -> dict[str, Any]:
    summary = Summary(
        requests=10,
        duration_s=10.0,
        throughput_tok_s=tok_s,
        ttft_p50_ms=ttft_ms,
        ttft_p99_ms=2 * ttft_ms,
        itl_p50_ms=itl_ms,
        itl_p99_ms=2 * itl_ms,
        tpot_p50_ms=tpot_ms,
        mean_concurrency=concurrency,
        goodput_rps=1.0,
        met_targets=1.0,
        mismatches=0,
    )
    return over_rounds([summary])


def _light(adaptive_tpot_ms: float) -> dict[str, dict[str, Any]]:
    """A light load: throughput follows the arrivals on every side; the streams differ."""
    return {
        "ours-off": _engine(21.6, 22.0, 1.5, itl_ms=23.0, ttft_ms=190.0),
        "ours-adaptive": _engine(21.7, adaptive_tpot_ms, 0.8),
        "openvino": _engine(21.7, 21.0, 1.4, itl_ms=21.0, ttft_ms=210.0),
        "openvino-spec": _engine(21.7, 12.0, 0.9),
    }


def test_without_openvino_plain_there_is_no_verdict() -> None:
    engines = _light(10.0)
    del engines["openvino"]
    assert against_peer(engines, burst=False) is None


def test_at_a_light_load_adaptive_is_judged_by_its_streams_against_openvinos_fastest() -> None:
    verdict = against_peer(_light(adaptive_tpot_ms=10.0), burst=False)
    assert verdict is not None and verdict["light"] and verdict["speed"] == "tpot_p50"
    adaptive = verdict["adaptive"]
    assert adaptive["best_peer"] == "openvino-spec"
    assert adaptive["over_best"] == pytest.approx(1.2) and adaptive["over_plain"] == pytest.approx(2.1)
    assert not adaptive["met"]  # 1.2x OpenVINO's best, where the goal is 1.3x

    faster = against_peer(_light(adaptive_tpot_ms=9.0), burst=False)
    assert faster is not None and faster["adaptive"]["met"]  # 12 / 9 = 1.33x


def test_an_engine_outside_the_comparison_does_not_decide_whether_the_load_was_light() -> None:
    engines = _light(10.0) | {"hf-static": _engine(20.0, 90.0, 6.0), "ours-fixed": _engine(21.7, 9.5, 5.0)}
    verdict = against_peer(engines, burst=False)
    assert verdict is not None and verdict["light"]
    assert verdict["adaptive"]["best_peer"] == "openvino-spec"  # a peer of ours, not another engine

    engines["openvino-spec"] = _engine(21.7, 12.0, 4.5)  # one compared engine above 4 in the system
    verdict = against_peer(engines, burst=False)
    assert verdict is not None and not verdict["light"] and verdict["speed"] == "throughput"


def test_off_is_held_to_every_figure_and_nothing_is_rounded_up() -> None:
    verdict = against_peer(_light(10.0), burst=False)
    assert verdict is not None
    off = verdict["off"]
    assert off["throughput"] == pytest.approx(21.6 / 21.7) and off["throughput"] < 1.0
    assert off["itl_p50"] == pytest.approx(23.0 / 21.0) and off["ttft_p50"] == pytest.approx(190.0 / 210.0)
    assert not off["met"]  # 0.995x throughput is below 1.0x

    engines = _light(10.0)
    engines["ours-off"] = _engine(21.7, 22.0, 1.5, itl_ms=25.3, ttft_ms=190.0)
    verdict = against_peer(engines, burst=False)
    assert verdict is not None and not verdict["off"]["met"]  # ITL p50 25.3 / 21 = 1.205x, over 1.2x
    engines["ours-off"] = _engine(21.7, 22.0, 1.5, itl_ms=25.0, ttft_ms=190.0)
    verdict = against_peer(engines, burst=False)
    assert verdict is not None and verdict["off"]["met"]


def test_in_the_burst_and_under_a_heavy_load_throughput_decides_and_only_plain_is_a_floor() -> None:
    burst = {
        "ours-off": _engine(127.0, 45.0, 6.0),
        "ours-adaptive": _engine(173.0, 30.0, 5.0),
        "openvino": _engine(131.6, 40.0, 6.0),
        "openvino-spec": _engine(170.9, 28.0, 5.0),
    }
    verdict = against_peer(burst, burst=True)
    assert verdict is not None and not verdict["light"] and verdict["speed"] == "throughput"
    assert verdict["adaptive"]["best_peer"] == "openvino-spec"
    assert verdict["adaptive"]["over_best"] == pytest.approx(173.0 / 170.9)
    assert verdict["adaptive"]["met"]  # no 1.3x goal outside a light load; above plain
    assert not verdict["off"]["met"]  # 127.0 / 131.6

    heavy = dict(burst, **{"ours-adaptive": _engine(120.0, 30.0, 5.0)})
    verdict = against_peer(heavy, burst=False)  # a rate, but not a light one
    assert verdict is not None and not verdict["light"]
    assert not verdict["adaptive"]["met"]  # below OpenVINO plain's throughput
    assert "not met" in summary_line(2.0, verdict) and "2/s" in summary_line(2.0, verdict)


def test_an_engine_left_out_leaves_its_part_out() -> None:
    engines = _light(10.0)
    del engines["ours-adaptive"], engines["openvino-spec"]
    verdict = against_peer(engines, burst=False)
    assert verdict is not None and "adaptive" not in verdict and "off" in verdict
    assert "adaptive" not in summary_line(0.5, verdict)


def test_goals_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        PeerGoals(light_concurrency=0)
    with pytest.raises(ValueError, match="positive"):
        PeerGoals(adaptive_over_best=-1.0)
