from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptivespec.bench.oracle import crossover
from adaptivespec.cli import main
from adaptivespec.engine.openvino_export import openvino_available
from adaptivespec.engine.suffix_proposer import suffix_available

from ..conftest import TinyPair


def test_crossover_is_the_start_of_the_trailing_run_of_zeros() -> None:
    assert crossover({"1": 4, "2": 3, "3-4": 0, "5-8": 2, "9-12": 0, "13-16": 0}) == 9
    assert crossover({"1": 4, "2": 0, "3-4": 1}) is None
    assert crossover({"1": 0, "2": 0}) == 1


def test_bench_control_report_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, plot = tmp_path / "c.json", tmp_path / "c.png"
    args = ["bench", "control", "--backend", "sim", "--hardware", "l4", "--target", "llama-3.1-8b"]
    args += ["--draft", "llama-3.2-1b", "--acceptance", "0.6", "--steps-per-bucket", "60", "--seed", "3"]
    trace = tmp_path / "trace.jsonl"
    assert main([*args, "--json", str(out), "--plot", str(plot), "--trace", str(trace)]) == 0
    report = json.loads(out.read_text())
    assert report["buckets"][0] == "1" and report["buckets"][-1] == "193-256"
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(lines) == 60 * len(report["buckets"])  # the adaptive policy's steps, one line each
    assert {line["batch"] for line in lines} >= {1, 256}
    oracle = report["oracle"]
    assert set(oracle["k_by_bucket"]) == set(report["buckets"])
    assert oracle["threshold"] is None or isinstance(oracle["threshold"], int)
    static = {"off", "always-k2", "always-k4", "threshold-16", "threshold-32"}
    assert set(report["policies"]) == static | {"oracle", "adaptive", "plain-ucb"}
    fields = {"goodput_tok_s", "ratio_to_oracle", "k_by_bucket", "p50_itl_ms", "p99_itl_ms"}
    for name, policy in report["policies"].items():
        assert fields <= policy.keys()
        assert policy["p50_itl_ms"] <= policy["p99_itl_ms"]
        if name in static:
            assert 0 < policy["ratio_to_oracle"] <= 1.0 + 1e-9, name
    adaptive = report["policies"]["adaptive"]
    assert {"learned_threshold", "warm_start", "first_1000_steps_ratio_to_oracle"} <= adaptive.keys()
    assert {"adaptive_steps_to_95", "plain_ucb_steps_to_95", "plain_over_adaptive"} <= report[
        "sample_efficiency"
    ].keys()
    assert report["policies"]["oracle"]["ratio_to_oracle"] == pytest.approx(1.0)
    assert report["policies"]["off"]["k_by_bucket"] == dict.fromkeys(report["buckets"], 0)
    threshold16 = report["policies"]["threshold-16"]["k_by_bucket"]
    assert threshold16["9-12"] == 4 and threshold16["17-24"] == 0
    # Where a policy picks the oracle's K, it reproduces the oracle's goodput exactly.
    for bucket, k in oracle["k_by_bucket"].items():
        if k == 4:
            assert (
                report["policies"]["always-k4"]["goodput_by_bucket"][bucket]
                == oracle["goodput_by_bucket"][bucket]
            )
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "oracle K by bucket" in capsys.readouterr().out


def test_bench_control_bad_preset_lists_presets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "control", "--backend", "sim", "--hardware", "h1000", "--target", "llama-3.1-8b"]
    assert main([*args, "--draft", "llama-3.2-1b", "--json", str(tmp_path / "x.json")]) == 2
    assert "presets: h100-sxm, h200, a100-80gb, l4" in capsys.readouterr().err


def test_bench_control_resumes_from_its_database(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/state.db"
    args = ["bench", "control", "--backend", "sim", "--hardware", "a100-80gb", "--target", "llama-3.2-3b"]
    args += ["--draft", "llama-3.2-1b", "--steps-per-bucket", "40", "--db", db]
    reports = []
    for run in ("cold", "warm"):
        out = tmp_path / f"{run}.json"
        assert main([*args, "--json", str(out)]) == 0
        reports.append(json.loads(out.read_text())["policies"]["adaptive"])
    assert reports[0]["warm_start"] is False and reports[1]["warm_start"] is True


def test_bench_serve_compares_http_with_direct(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "serve.json"
    args = ["bench", "serve", "--backend", "sim", "--clients", "4", "--max-tokens", "32", "--rounds", "1"]
    assert main([*args, "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["direct_tok_s"] > 0 and result["http_tok_s"] > 0
    assert result["ratio"] == pytest.approx(result["http_tok_s"] / result["direct_tok_s"])
    assert "ratio" in capsys.readouterr().out


def test_bench_control_quick_on_the_real_engine_has_the_report_shape(
    tiny_pair: TinyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Shape only: tiny models, few steps; the figures themselves come from docs/benchmarks.md runs."""
    out = tmp_path / "hf.json"
    args = ["bench", "control", "--backend", "hf", "--quick", "--target", str(tiny_pair.target)]
    args += ["--draft", str(tiny_pair.draft), "--steps-per-bucket", "6", "--repeats", "2"]
    trace = tmp_path / "trace.jsonl"
    args += ["--trace", str(trace)]
    assert main([*args, "--new-tokens", "8", "--background-load", "1", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["scenario"]["backend"] == "hf" and report["scenario"]["steps_per_bucket"] == 6
    # the trace: one line per step the adaptive policy learned from, in order
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    counts = report["policies"]["adaptive"]["k_counts_by_bucket"]
    assert len(lines) == sum(sum(ks.values()) for ks in counts.values())
    assert [line["step"] for line in lines] == list(range(1, len(lines) + 1))
    for line in lines:
        assert line["ran"] == "off" or line["ran"].startswith("draft:")
        assert 0 <= line["width"] <= int(line["ran"].partition(":")[2] or 0)
        assert line["step_ms"] > 0 and line["emitted"] >= line["batch"] >= 1
        assert 1 <= line["threads"] <= report["scenario"]["usable_cpus"]
        assert line["decided"] is not None and line["next"]  # the step's own cell was visited
        # what the cell priced its measured arms at: the arm just run among them
        assert line["ran"] in line["priced"]
        for tokens, ms, steps in line["priced"].values():
            assert tokens >= 1.0 and ms > 0 and steps >= 1
    assert report["scenario"]["background_load"] == 1
    # threads left to the engine: what it ran on, beside how busy the other processes kept the CPUs
    assert 1 <= report["scenario"]["threads_at_end"] <= report["scenario"]["usable_cpus"]
    assert report["scenario"]["other_cores_busy_at_end"] >= 0
    assert report["buckets"][0] == "1" and report["buckets"][-1] == "13-16"  # --quick stops at 16
    static = {"off", "always-k2", "always-k4", "threshold-16", "threshold-32"}
    assert set(report["policies"]) == static | {"oracle", "adaptive", "plain-ucb"}
    for name, policy in report["policies"].items():  # shape only: 2 repeats of 3 steps prove nothing
        low, high = policy["ratio_ci"]
        assert 0 < low <= high and policy["ratio_to_oracle"] > 0, name
    oracle = report["oracle"]
    fixed = static | {f"k{k}" for k in (0, 1, 2, 3, 4, 5, 6, 8)}
    for bucket, pooled in oracle["pooled_by_bucket"].items():
        assert f"k{oracle['k_by_bucket'][bucket]}" in pooled and set(pooled) <= fixed
    comparisons = report["comparisons"]
    assert comparisons["best_static"] in static and isinstance(comparisons["holds"], bool)
    assert len(comparisons["adaptive_minus_off"]) == 3 and isinstance(report["inconclusive"], bool)
    ratio = {name: policy["ratio_to_oracle"] for name, policy in report["policies"].items()}
    best = ratio[comparisons["best_static"]]
    assert comparisons["adaptive_ge_best_static"] == (ratio["adaptive"] >= 0.99 * best)
    assert comparisons["adaptive_ge_off"] == (ratio["adaptive"] >= ratio["off"])
    spread = report["same_configuration_spread"]
    assert 1.0 <= spread["median"] <= spread["worst"]
    assert 0.0 <= report["policies"]["adaptive"]["exploration"]["dominated_share"] <= 1.0
    picks = comparisons["cross_fitted_best_static"]
    assert len(picks) == report["repeats"] and set(picks) <= static
    assert isinstance(comparisons["adaptive_ge_cross_fitted_best_static"], bool)
    point, low, high = report["policies"]["adaptive"]["ratio_to_cross_fitted_oracle"]
    assert 0 < low <= high and point > 0
    assert {"adaptive_steps_to_95", "plain_ucb_steps_to_95"} <= report["sample_efficiency"].keys()
    assert "holds:" in capsys.readouterr().out


@pytest.mark.parametrize("runtime", ["torch", "openvino"])
def test_bench_control_on_the_real_engine_takes_a_traffic_mix_a_drafter_and_a_runtime(
    tiny_pair: TinyPair, tmp_path: Path, runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shape only: the mix's prompts, the drafter and the runtime asked for are what the run used."""
    if runtime == "openvino" and not openvino_available():
        pytest.skip("openvino is not installed (pip install -e '.[openvino]')")
    monkeypatch.setenv("ADAPTIVESPEC_CACHE_DIR", str(tmp_path / "cache"))  # the converted model
    out = tmp_path / "mix.json"
    proposer = "suffix" if suffix_available() else "ngram"
    args = ["bench", "control", "--backend", "hf", "--quick", "--target", str(tiny_pair.target)]
    args += ["--traffic", "agent", "--proposer", proposer, "--max-batch", "2", "--runtime", runtime]
    assert (
        main([*args, "--steps-per-bucket", "4", "--repeats", "2", "--new-tokens", "4", "--json", str(out)])
        == 0
    )
    scenario = json.loads(out.read_text())["scenario"]
    assert scenario["traffic"] == "agent" and scenario["model_key"].split("+")[1].startswith(proposer)
    assert scenario["hardware_key"].endswith("+openvino") == (runtime == "openvino")
    low, high = scenario["prompt_tokens"]
    assert 64 < low <= high  # whole agent turns, not 64-token windows
