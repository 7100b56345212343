"""`bench workload` on tiny models: the report's shape and the token comparison, never timings."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from adaptivespec.bench.traffic import Lengths, Request, Served, Targets, TrafficShape, requests, summarize
from adaptivespec.cli import main
from adaptivespec.engine.openvino_export import openvino_available

from ..conftest import TinyPair

ENGINE_KEYS = {
    "throughput_tok_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "tpot_p50_ms",
    "mean_concurrency",
    "mismatches",
}


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
    assert main([*args, "--rounds", "2", "--threads", "1", "--background-load", "1"]) == 0
    report = json.loads(out.read_text())
    # No --runtime: serve's default, OpenVINO where it is installed (runtime_choice.py).
    assert report["method"]["ours_runtime"] == ("openvino" if openvino_available() else "torch")
    assert report["method"]["ours_runtime_asked"] == "auto" and report["method"]["background_load"] == 1
    assert report["model"] and [r["burst"] for r in report["rates"]] == [False, True]
    assert report["rates"][0]["rate_rps"] == 50.0 and report["rates"][1]["rate_rps"] is None
    assert report["method"]["rounds"] == 2 and report["method"]["threads_asked"] == 1
    assert report["traffic"]["fixed_k"] == 5  # OpenVINO GenAI's own prompt-lookup default
    assert report["method"]["against_openvino"]["adaptive_over_best"] == 1.3
    assert report["machine"]["threads"] == 1
    for rate in report["rates"]:
        engines = rate["engines"]
        assert set(engines) == {"ours-off", "ours-fixed", "ours-adaptive"}  # --quick runs no peer
        assert "against_openvino" not in rate  # a verdict against OpenVINO only where it ran
        for summary in engines.values():
            assert ENGINE_KEYS <= summary.keys() and summary["requests"] == 6
            assert summary["ttft_p50_ms"] <= summary["ttft_p99_ms"]
            assert summary["mismatches"] == 0  # speculation never changes greedy output
            # Each figure is the median of the rounds, within their range.
            assert len(summary["rounds"]) == 2
            low, high = summary["ranges"]["throughput_tok_s"]
            assert low <= summary["throughput_tok_s"] <= high
            each = sorted(r["throughput_tok_s"] for r in summary["rounds"])
            assert [low, high] == each and summary["throughput_tok_s"] == sum(each) / 2
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


def test_a_streams_speed_is_read_per_request_whatever_pieces_it_came_in() -> None:
    """Two requests, one streamed in pieces of several tokens (as speculation emits them), one
    mostly a token a piece: TPOT is each request's time per token after its first (the pieces'
    gaps would call the faster stream the slower), and the mean requests in the system is
    their time in it over the run's (Little's law)."""
    prompt = [1, 2, 3]
    pieces = Served(Request(0.0, prompt, 9), 0.0, [1.0, 2.0, 3.0], list(range(9)))  # 8 tokens in 2 s
    single = Served(Request(1.0, prompt, 5), 1.0, [1.5, 2.0, 2.5, 3.0, 4.0], list(range(5)))  # 4 in 2.5 s
    summary = summarize([pieces, single], Targets(ttft_s=1.0, tpot_s=0.4), None)
    assert summary.tpot_p50_ms == pytest.approx((250.0 + 625.0) / 2)
    assert summary.itl_p50_ms == pytest.approx(750.0)  # the pieces' gaps say little of the speed
    # In the system 3 s each over a 4 s run: 1.5 requests on average.
    assert summary.mean_concurrency == pytest.approx(1.5)
    assert summary.met_targets == 0.5  # the second stream's 625 ms a token misses the 400 ms target


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


def _planned(*flags: str) -> list[str]:
    import argparse

    from adaptivespec.bench import commands, workload

    args = commands.parser(argparse.ArgumentParser(add_help=False)).parse_args(["workload", *flags])
    return workload.plan_of(args).engines


def test_an_openvino_environment_that_cannot_run_the_peer_is_named_before_any_model_loads(
    tmp_path: Path,
) -> None:
    """Found before the target loads and the other engines run, not when the peer's turn comes."""
    not_python = tmp_path / "python"
    not_python.write_text("not a program")
    flags = ("--engines", "ours-off,openvino", "--openvino-python")
    with pytest.raises(SystemExit, match="does not exist"):
        _planned(*flags, str(tmp_path / "missing"))
    with pytest.raises(SystemExit, match="does not run"):
        _planned(*flags, str(not_python))
    if importlib.util.find_spec("openvino_genai") is None:  # ours has none, as the README sets it up
        with pytest.raises(SystemExit, match="cannot import openvino_genai"):
            _planned(*flags, sys.executable)


def test_engines_named_on_the_command_line_are_run_even_with_quick(tmp_path: Path) -> None:
    peer = tmp_path / "python"  # an environment that imports what the peer needs
    peer.write_text("#!/bin/sh\nexit 0\n")
    peer.chmod(0o755)
    named = _planned("--quick", "--engines", "ours-off,openvino", "--openvino-python", str(peer))
    assert named == ["ours-off", "openvino"]
    assert not any(e.startswith("openvino") for e in _planned("--quick", "--openvino-python", "/x"))


def test_the_adaptive_runs_start_from_a_fresh_controller() -> None:
    from adaptivespec.bench.workload_engines import AdaptivePolicy
    from adaptivespec.controller.controller import Controller
    from adaptivespec.engine.telemetry import StepTelemetry

    adaptive = AdaptivePolicy(lambda: Controller("m", "h", methods=("draft",)))
    first = adaptive.controller
    record = StepTelemetry("m", "h", 4, 2, 300.0, 8, 5, 9, 0.001, 0.01, 0.011, 0.0, 2, (3, 2))
    assert first.ingest(record) and first.cells
    adaptive.renew()
    assert adaptive.controller is not first and adaptive.policy is adaptive.controller.live
    assert adaptive.controller.ingested == 0 and not adaptive.controller.cells


def test_the_static_server_waits_its_window_for_a_batch_to_fill(tiny_pair: TinyPair) -> None:
    """Two requests 50 ms apart: with a 500 ms window they share one batch (one `generate`, so
    the same step times); with none, the first starts alone."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoModelForCausalLM

    from adaptivespec.bench import static_batching
    from adaptivespec.bench.traffic import Request

    model = AutoModelForCausalLM.from_pretrained(tiny_pair.target).eval()
    traffic = [Request(0.0, [5, 6, 7], 4), Request(0.05, [8, 9, 10], 4)]
    with ThreadPoolExecutor(1) as compute:
        for window, together in ((0.5, True), (0.0, False)):
            served = asyncio.run(static_batching.serve(model, 0, traffic, 4, compute, window_s=window))
            assert (served[0].chunk_times == served[1].chunk_times) is together
            assert [len(s.tokens) for s in served] == [4, 4]
    # A full batch does not wait out the window.
    with ThreadPoolExecutor(1) as compute:
        served = asyncio.run(static_batching.serve(model, 0, traffic, 2, compute, window_s=30.0))
    assert served[0].chunk_times == served[1].chunk_times and served[0].chunk_times[0] - served[0].sent < 10


def test_every_round_of_ours_drafts_as_if_its_requests_were_new(tiny_pair: TinyPair) -> None:
    """Rounds replay the same requests. A suffix tree that kept an earlier round's outputs would
    draft this request's own output back to it: the same request served twice at a fixed K
    must take as many steps (its stream as many pieces) the second time as the first."""
    from adaptivespec.engine.suffix_proposer import suffix_available

    if not suffix_available():
        pytest.skip("arctic-inference is not installed (ops/install-suffix.sh)")
    code = "def add(a, b):\n    return a + b\n"
    rounds = [
        served[0]
        for served in _served_by_ours(tiny_pair, "suffix", "ours-fixed", code, [(0.0, 48)], rounds=3)
    ]
    assert [r.tokens for r in rounds[1:]] == [rounds[0].tokens] * 2
    assert [len(r.chunk_times) for r in rounds[1:]] == [len(rounds[0].chunk_times)] * 2


def test_a_warmed_controller_is_stated_and_its_warm_up_is_not_measured(
    tiny_pair: TinyPair, tmp_path: Path
) -> None:
    """The warm-up serves the next seed's prompts: had its pass been the one measured, its
    tokens would differ from ours-off's on the measured requests."""
    out = tmp_path / "workload.json"
    args = ["bench", "workload", "--quick", "--target", str(tiny_pair.target)]
    args += ["--draft", str(tiny_pair.draft)]
    args += ["--device", "cpu", "--dtype", "float32", "--requests", "4", "--rates", "50", "--no-burst"]
    args += ["--engines", "ours-off,ours-adaptive", "--long-prompt", "0", "--rounds", "1", "--threads", "1"]
    assert main([*args, "--warm-controller", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert "warmed on a pass of the next seed's requests" in report["method"]["controller"]
    adaptive = report["rates"][0]["engines"]["ours-adaptive"]
    assert adaptive["requests"] == 4 and adaptive["mismatches"] == 0


def test_the_openvino_peer_is_timed_from_each_arrival_not_from_when_its_worker_added_it() -> None:
    """The worker adds a request only between its steps: one that arrived during a step is
    added when the step ends. Timed from there, its TTFT would leave out the wait that ours
    counts; both are timed from the arrival as scheduled."""
    from adaptivespec.bench.openvino_peer import served_from

    traffic = [Request(0.0, [1, 2], 2), Request(0.25, [3], 2)]
    result = {"served": [
        {"sent": 0.001, "chunk_times": [0.1, 0.2], "tokens": [5, 6]},
        {"sent": 0.29, "chunk_times": [0.4, 0.45], "tokens": [7, 8]},  # added after a step ended
    ]}  # fmt: skip
    served = served_from(traffic, result)
    assert [s.sent for s in served] == [0.0, 0.25]
    assert served[1].ttft == pytest.approx(0.15)  # from 0.25, not 0.29


def test_ours_is_timed_from_each_arrival_as_scheduled(tiny_pair: TinyPair) -> None:
    """Ours times a request from its arrival as scheduled, as the peers do: not from when the
    task that sends it woke (late by whatever else the event loop was doing)."""
    arrivals = [(0.0, 24), (0.03, 8), (0.07, 8)]
    (served,) = _served_by_ours(tiny_pair, "ngram", "ours-off", "one two three four", arrivals)
    # exactly the scheduled gaps: a wake-up time would be late by a varying fraction of a ms
    assert [s.sent - served[0].sent for s in served] == pytest.approx([0.0, 0.03, 0.07], abs=1e-9)
    assert all(s.ttft > 0 for s in served)


def _served_by_ours(
    pair: TinyPair,
    proposer: str,
    engine: str,
    text: str,
    arrivals: list[tuple[float, int]],
    *,
    rounds: int = 1,
) -> list[list[Served]]:
    """`rounds` serves by one of ours (K up to 8) of requests for `text` at (arrival, max tokens)."""
    import asyncio
    from dataclasses import replace

    from adaptivespec.bench.workload_engines import Harness, adaptive_policy
    from adaptivespec.engine.engine import compute_thread
    from adaptivespec.engine.loader import load_runner

    from ..conftest import engine_config

    config = replace(engine_config(pair, proposer, max_spec_tokens=8), threads=1)
    compute = compute_thread()
    try:
        loaded = compute.submit(load_runner, config, False).result()
        harness = Harness(loaded, compute, config, adaptive_policy(loaded), 8, None, 0.0)
        prompt = loaded.tokenizer.encode(text, add_special_tokens=False)
        traffic = [Request(at, prompt, tokens) for at, tokens in arrivals]
        return [asyncio.run(harness.server(engine)(traffic)) for _ in range(rounds)]
    finally:
        compute.shutdown(wait=True)
