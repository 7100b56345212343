"""`bench workload` on tiny models: the report's shape and the token comparison, never timings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptivespec.bench.traffic import Lengths, TrafficShape, requests
from adaptivespec.cli import main

from ..conftest import TinyPair

ENGINE_KEYS = {"throughput_tok_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "mismatches"}


def test_quick_workload_report(tiny_pair: TinyPair, tmp_path: Path) -> None:
    lengths, out = tmp_path / "lengths.json", tmp_path / "workload.json"
    lengths.write_text(json.dumps({"prompt_tokens": [4, 40], "output_tokens": {"samples": [3, 9, 14]}}))
    args = [
        "bench",
        "workload",
        "--quick",
        "--target",
        str(tiny_pair.target),
        "--draft",
        str(tiny_pair.draft),
    ]
    args += ["--device", "cpu", "--dtype", "float32", "--requests", "6", "--rates", "50", "--max-batch", "4"]
    args += ["--lengths", str(lengths), "--streams", "3", "--long-prompt", "60", "--json", str(out)]
    assert main(args) == 0
    report = json.loads(out.read_text())
    assert report["model"] and [r["burst"] for r in report["rates"]] == [False, True]
    assert report["rates"][0]["rate_rps"] == 50.0 and report["rates"][1]["rate_rps"] is None
    for rate in report["rates"]:
        engines = rate["engines"]
        assert set(engines) == {"ours-off", "ours-fixed", "ours-adaptive"}  # --quick runs no peer
        for summary in engines.values():
            assert ENGINE_KEYS <= summary.keys() and summary["requests"] == 6
            assert summary["ttft_p50_ms"] <= summary["ttft_p99_ms"]
            assert summary["mismatches"] == 0  # speculation never changes greedy output
    stall = report["chunked_prefill"]
    assert {"steady_itl_p99_ms", "long_prompt_itl_p99_ms", "long_prompt_tokens", "streams"} <= stall.keys()
    assert stall["long_prompt_tokens"] == 60 and stall["streams"] == 3
    assert stall["whole"]["chunking"] == "whole" and stall["paced"]["chunking"] == "paced"


def test_static_batching_peer_serves_the_same_tokens(tiny_pair: TinyPair, tmp_path: Path) -> None:
    out = tmp_path / "workload.json"
    lengths = tmp_path / "lengths.json"
    lengths.write_text(json.dumps({"prompt_tokens": [8, 8], "output_tokens": [6, 12]}))
    args = ["bench", "workload", "--target", str(tiny_pair.target), "--draft", str(tiny_pair.draft)]
    args += ["--device", "cpu", "--dtype", "float32", "--requests", "5", "--rates", "100", "--no-burst"]
    args += ["--engines", "ours-off,hf-static", "--lengths", str(lengths), "--long-prompt", "0"]
    assert main([*args, "--max-batch", "4", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    engines = report["rates"][0]["engines"]
    assert set(engines) == {"ours-off", "hf-static"} and "chunked_prefill" not in report
    # Equal-length prompts need no padding, so transformers' generate gives our tokens exactly.
    assert engines["hf-static"]["mismatches"] == 0


def test_traffic_is_seeded_and_rates_only_space_the_same_requests() -> None:
    shape = TrafficShape(Lengths(4, 50), Lengths(2, 30))
    corpus = list(range(1000))
    slow, fast = requests(shape, 1.0, 40, corpus, seed=7), requests(shape, 4.0, 40, corpus, seed=7)
    assert [r.prompt for r in slow] == [r.prompt for r in fast]
    assert [r.max_tokens for r in slow] == [r.max_tokens for r in fast]
    assert slow[0].arrival == 0.0 and slow[-1].arrival == pytest.approx(4 * fast[-1].arrival)
    burst = requests(shape, None, 40, corpus, seed=7)
    assert {r.arrival for r in burst} == {0.0}
    assert all(4 <= len(r.prompt) <= 50 and 2 <= r.max_tokens <= 30 for r in slow)
    assert requests(shape, 1.0, 40, corpus, seed=8)[0].prompt != slow[0].prompt


def test_a_bad_length_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "lengths.json"
    path.write_text(json.dumps({"prompt_tokens": [0, 10]}))
    with pytest.raises(ValueError, match="1 <= low <= high"):
        TrafficShape.from_file(path)
    path.write_text(json.dumps({"prompt_tokens": "long"}))
    with pytest.raises(ValueError, match="prompt_tokens must be"):
        TrafficShape.from_file(path)


def test_the_openvino_peer_names_its_missing_environment() -> None:
    with pytest.raises(SystemExit, match="--openvino-python"):
        main(["bench", "workload", "--engines", "ours-off,openvino"])
    with pytest.raises(SystemExit, match="unknown engines"):
        main(["bench", "workload", "--engines", "vllm"])


def test_engines_named_on_the_command_line_are_run_even_with_quick() -> None:
    import argparse

    from adaptivespec.bench import commands, workload

    def planned(*flags: str) -> list[str]:
        args = commands.parser(argparse.ArgumentParser(add_help=False)).parse_args(["workload", *flags])
        return workload.plan_of(args).engines

    named = planned("--quick", "--engines", "ours-off,openvino", "--openvino-python", "/opt/ov/bin/python")
    assert named == ["ours-off", "openvino"]
    assert not any(e.startswith("openvino") for e in planned("--quick", "--openvino-python", "/x"))
