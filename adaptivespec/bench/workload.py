"""`adaptivespec bench workload`: serving traffic against our engine and its peers.

Requests arrive as a seeded Poisson process at each rate (and then as one burst), with chat-
like prompt and output lengths, and are served greedily by each engine in turn: ours in
process, with speculation off, with a fixed K and with the controller; transformers' own
`generate` in static batches as a naive server would run it; and OpenVINO GenAI's continuous
batching in its own environment. Every engine serves the same requests, and its tokens are
compared with the first engine's. Then the chunked-prefill check: a long prompt arrives into
decoding streams, fed whole and paced.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from adaptivespec.bench import prefill_stall
from adaptivespec.bench.arguments import numbers, positive_integer
from adaptivespec.bench.background_load import BackgroundLoad
from adaptivespec.bench.machine import machine
from adaptivespec.bench.openvino_peer import OpenVINO
from adaptivespec.bench.peer_goals import PeerGoals, against_peer, summary_line
from adaptivespec.bench.traffic import (
    Lengths,
    Summary,
    Targets,
    TrafficShape,
    over_rounds,
    requests,
    summarize,
)
from adaptivespec.bench.traffic_mixes import MIXES
from adaptivespec.bench.traffic_mixes import prompts as traffic_prompts
from adaptivespec.bench.workload_engines import Harness, adaptive_policy
from adaptivespec.config import DEFAULT_MODEL, DEVICES, DTYPES, RUNTIMES, EngineConfig, ModelConfig
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.engine import compute_thread
from adaptivespec.engine.loader import load_runner

ENGINES = ("ours-off", "ours-fixed", "ours-adaptive", "hf-static", "openvino", "openvino-spec")
PEERS = ("hf-static", "openvino", "openvino-spec")


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = kinds.add_parser(
        "workload", help="arriving requests of mixed lengths: throughput, TTFT, ITL, goodput per engine"
    )
    bench.add_argument("--target", default=DEFAULT_MODEL)
    bench.add_argument(
        "--draft", default=None, help="a draft model; without one, ours drafts by n-gram lookup"
    )
    bench.add_argument("--device", choices=DEVICES, default="auto")
    bench.add_argument("--dtype", choices=DTYPES, default="auto")
    bench.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default="auto",
        help="what runs ours' target forwards (default auto, as serve: openvino on a CPU where it can)",
    )
    bench.add_argument("--rates", type=numbers, default=None, help="requests per second (default 0.25,0.5,1)")
    bench.add_argument("--no-burst", action="store_true", help="skip the burst (every request at once)")
    bench.add_argument("--requests", type=int, default=None, help="per rate (default 32; --quick 10)")
    bench.add_argument("--lengths", type=Path, default=None, help="JSON: prompt_tokens / output_tokens")
    bench.add_argument(
        "--engines", default=None, help=f"any of {','.join(ENGINES)} (default: all it can run)"
    )
    bench.add_argument(
        "--k",
        type=positive_integer,
        default=5,
        help="K of ours-fixed and of openvino-spec's prompt lookup (default 5, OpenVINO GenAI's own "
        "num_assistant_tokens for prompt lookup)",
    )
    bench.add_argument(
        "--openvino-python", type=Path, default=None, help="the Python of an environment with openvino-genai"
    )
    bench.add_argument(
        "--openvino-kv-precision",
        choices=("f32", "u8", "f16"),
        default="f32",
        help="OpenVINO's KV cache: f32 as ours (default), or u8, its CPU plugin's own default on x86",
    )
    bench.add_argument("--max-batch", type=int, default=32, help="our batch rows, and the static batch size")
    bench.add_argument("--ttft-target-ms", type=float, default=3000.0)
    bench.add_argument("--tpot-target-ms", type=float, default=200.0)
    bench.add_argument(
        "--streams", type=int, default=32, help="decoding streams in the chunked-prefill check"
    )
    bench.add_argument(
        "--long-prompt",
        type=int,
        default=None,
        help="tokens of the long prompt (default 2000; --quick 1000; 0: skip)",
    )
    bench.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds per rate: every engine serves the rate's traffic once a round, in a rotated order",
    )
    bench.add_argument(
        "--static-window-ms",
        type=float,
        default=250.0,
        help="hf-static: how long the oldest waiting request waits for a batch to fill",
    )
    bench.add_argument(
        "--prefill-chunk-tokens",
        type=int,
        default=0,
        help="ours: prompt tokens a step may take while streams decode (0: paced by measurement, "
        "the default; OpenVINO's peer takes up to 512 a step)",
    )
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument(
        "--background-load",
        type=int,
        default=0,
        help="busy single-threaded processes beside every engine, all along (a shared machine)",
    )
    bench.add_argument("--traffic", choices=MIXES, default="chat", help="the prompts' mix (traffic_mixes.py)")
    bench.add_argument("--proposer", default="auto", help="ours' drafters, comma-separated")
    bench.add_argument(
        "--warm-controller",
        action="store_true",
        help="ours-adaptive's controller first learns, unmeasured, from a pass of other requests "
        "(the next seed's) at the same rate, as a daemon that has served such traffic before; "
        "fresh again at each round",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="fewer and shorter requests, two rates, no peer unless --engines names one",
    )
    bench.add_argument("--json", type=Path, default=None)


@dataclass(frozen=True, slots=True)
class Plan:
    rates: list[float | None]  # None: the burst
    count: int
    rounds: int
    shape: TrafficShape
    engines: list[str]
    targets: Targets


def plan_of(args: argparse.Namespace) -> Plan:
    runnable = [e for e in ENGINES if args.openvino_python or not e.startswith("openvino")]
    engines = [e for e in args.engines.split(",") if e] if args.engines else runnable
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        raise SystemExit(f"unknown engines {unknown}; choose from {', '.join(ENGINES)}")
    if args.quick and not args.engines:  # engines asked for by name are run, --quick or not
        engines = [e for e in engines if e not in PEERS]
    if any(e.startswith("openvino") for e in engines):
        OpenVINO.check(args.openvino_python)
    shape = TrafficShape.from_file(args.lengths) if args.lengths else _default_shape(args.quick)
    rates: list[float | None] = list(args.rates or ([0.5] if args.quick else [0.25, 0.5, 1.0]))
    if not args.no_burst:
        rates.append(None)
    count = args.requests or (10 if args.quick else 32)
    if args.rounds < 1 or args.static_window_ms < 0 or args.background_load < 0:
        raise SystemExit("--rounds must be >= 1, and --static-window-ms and --background-load >= 0")
    targets = Targets(args.ttft_target_ms / 1e3, args.tpot_target_ms / 1e3)
    return Plan(rates, count, args.rounds, shape, engines, targets)


def _default_shape(quick: bool) -> TrafficShape:
    return TrafficShape(Lengths(16, 512), Lengths(16, 128)) if quick else TrafficShape()


def run(args: argparse.Namespace) -> None:
    plan = plan_of(args)
    # The engines' rounds interleave, so the load falls on each of them alike.
    with BackgroundLoad(args.background_load):
        result = asyncio.run(_bench(args, plan))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


async def _bench(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    compute = compute_thread()
    long_tokens = args.long_prompt if args.long_prompt is not None else (1000 if args.quick else 2000)
    context = max(plan.shape.longest, long_tokens + prefill_stall.STREAM_PROMPT) + 8
    rows = max(args.max_batch, args.streams + 1)
    models = ModelConfig(
        target=args.target,
        draft=args.draft,
        proposer=args.proposer,
        device=args.device,
        dtype=args.dtype,
        runtime=args.runtime,
    )
    config = EngineConfig(
        max_batch=rows,
        max_queued=max(256, plan.count),
        max_context=context,
        threads=args.threads,
        models=models,
    )
    loaded = await asyncio.get_running_loop().run_in_executor(compute, load_runner, config)
    corpus = loaded.tokenizer.encode("\n".join(held_out_documents()), add_special_tokens=False)
    # The warm-up pass (--warm-controller) replays the next seed's requests.
    seeds = (args.seed, args.seed + 1) if args.warm_controller else (args.seed,)
    mixes = [
        None if args.traffic == "chat" else traffic_prompts(args.traffic, loaded.tokenizer, plan.count, seed)
        for seed in seeds
    ]
    # The runner holds rows for the stall check's streams; the engines serve max_batch of them.
    serving = replace(config, max_batch=args.max_batch, prefill_chunk_tokens=args.prefill_chunk_tokens)
    adaptive = adaptive_policy(loaded)
    openvino = None
    if any(e.startswith("openvino") for e in plan.engines):
        openvino = OpenVINO.prepare(
            args.openvino_python, loaded.target.path, args.max_batch, args.openvino_kv_precision
        )
    window_s = args.static_window_ms / 1e3
    harness = Harness(loaded, compute, serving, adaptive, args.k, openvino, window_s)
    report: dict[str, Any] = {
        "model": loaded.runner.model_key,
        # Read on the compute thread: torch's thread count is that thread's own setting.
        "machine": await asyncio.get_running_loop().run_in_executor(
            compute, machine, loaded.runner.hardware_key
        ),
        "rates": [],
    }
    report["traffic"] = {
        "mix": args.traffic,
        "prompt_tokens": [plan.shape.prompt.low, plan.shape.prompt.high],
        "output_tokens": [plan.shape.output.low, plan.shape.output.high],
        "requests_per_rate": plan.count,
        "targets": {"ttft_ms": plan.targets.ttft_s * 1e3, "tpot_ms": plan.targets.tpot_s * 1e3},
        "seed": args.seed,
        "fixed_k": args.k,
    }
    report["method"] = {
        "rounds": plan.rounds,
        "order": "every engine once a round, the order rotated by one each round",
        "figures": "each engine's median over the rounds, its range in `ranges`, every round in `rounds`",
        "controller": (
            "fresh for each rate and round, then warmed on a pass of the next seed's requests at "
            "that rate (unmeasured; its drafters forget them)"
            if args.warm_controller
            else "fresh for each rate and round: nothing learned carries over"
        ),
        "threads_asked": args.threads,  # 0: ours left to the engine, OpenVINO to its own choice
        "static_window_ms": args.static_window_ms,
        "ours_runtime": loaded.runner.runtime,  # what ran ours' target forwards: torch or openvino
        "ours_runtime_asked": args.runtime,
        "openvino_kv_precision": args.openvino_kv_precision,  # the peer's KV cache; ours is f32
        "prefill_chunk_tokens": args.prefill_chunk_tokens,  # ours; 0: paced (prefill_pacer.py)
        "background_load": args.background_load,  # busy processes beside the engines (background_load.py)
        "against_openvino": asdict(PeerGoals()),  # the goals each rate's `against_openvino` reads
    }
    print(
        f"{loaded.runner.model_key} on {loaded.runner.hardware_key}: {plan.count} requests per rate, "
        f"prompts {plan.shape.prompt.low}-{plan.shape.prompt.high}, outputs {plan.shape.output.low}-"
        f"{plan.shape.output.high} tokens",
        flush=True,
    )
    print(_HEADER, flush=True)
    try:
        for rate in plan.rates:
            traffic, *warm_up = (
                requests(plan.shape, rate, plan.count, corpus, seed, prompts=mix)
                for seed, mix in zip(seeds, mixes, strict=True)
            )
            rounds: dict[str, list[Summary]] = {name: [] for name in plan.engines}
            reference: list[list[int]] | None = None
            for turn in range(plan.rounds):
                harness.adaptive.renew()  # what it learned in another round or rate stays there
                # Rotated, so that no engine always runs first (or right after another) while
                # the machine drifts between minutes.
                shift = turn % len(plan.engines)
                for name in plan.engines[shift:] + plan.engines[:shift]:
                    if name == "ours-adaptive" and warm_up:
                        await harness.server(name)(warm_up[0])
                    served = await harness.server(name)(traffic)
                    summary = summarize(served, plan.targets, reference)
                    reference = reference or [s.tokens for s in served]
                    rounds[name].append(summary)
                    print(_row(rate, name, str(turn + 1), asdict(summary)), flush=True)
            report["rates"].append(_rate_report(rate, rounds))
        if harness.versions:
            report["machine"]["peers"] = harness.versions
        if long_tokens:
            report["chunked_prefill"] = await harness.stalls(corpus, args.streams, long_tokens)
    finally:
        adaptive.stop()
        compute.shutdown(wait=True)
    return report


def _rate_report(rate: float | None, rounds: dict[str, list[Summary]]) -> dict[str, Any]:
    """One rate's medians per engine, printed with their ranges, and the verdict against
    OpenVINO where it ran."""
    engines = {name: over_rounds(summaries) for name, summaries in rounds.items()}
    for name, figures in engines.items():
        low, high = figures["ranges"]["throughput_tok_s"]
        print(_row(rate, name, "med", figures) + f"   tok/s range [{low:.1f}, {high:.1f}]", flush=True)
    entry: dict[str, Any] = {"rate_rps": rate, "burst": rate is None, "engines": engines}
    verdict = against_peer(engines, rate is None)
    if verdict is not None:
        entry["against_openvino"] = verdict
        print(summary_line(rate, verdict), flush=True)
    return entry


_HEADER = (
    f"{'rate/s':>6} {'engine':<14} {'round':>5} {'tok/s':>7} {'TTFT p50':>9} {'TTFT p99':>9} "
    f"{'ITL p50':>8} {'ITL p99':>8} {'TPOT p50':>8} {'conc':>5} {'goodput/s':>9} {'met':>5} "
    f"{'mismatch':>8}"
)


def _row(rate: float | None, name: str, label: str, s: dict[str, Any]) -> str:
    """One round's figures (`label` its number) or their medians over the rounds ("med")."""
    shown = "burst" if rate is None else f"{rate:g}"
    return (
        f"{shown:>6} {name:<14} {label:>5} {s['throughput_tok_s']:>7.1f} {s['ttft_p50_ms']:>9.0f} "
        f"{s['ttft_p99_ms']:>9.0f} {s['itl_p50_ms']:>8.1f} {s['itl_p99_ms']:>8.1f} "
        f"{s['tpot_p50_ms']:>8.1f} {s['mean_concurrency']:>5.1f} "
        f"{s['goodput_rps']:>9.3f} {s['met_targets']:>5.2f} {s['mismatches']:>8}"
    )
