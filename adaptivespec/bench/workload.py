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
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from adaptivespec.bench import prefill_stall, static_batching
from adaptivespec.bench.arguments import numbers
from adaptivespec.bench.machine import machine
from adaptivespec.bench.openvino_peer import OpenVINO
from adaptivespec.bench.traffic import (
    Lengths,
    Request,
    Served,
    Summary,
    Targets,
    TrafficShape,
    requests,
    summarize,
)
from adaptivespec.bench.traffic_mixes import MIXES
from adaptivespec.bench.traffic_mixes import prompts as traffic_prompts
from adaptivespec.config import DEFAULT_MODEL, DEVICES, DTYPES, EngineConfig, ModelConfig
from adaptivespec.controller.controller import Controller, ControllerConfig
from adaptivespec.controller.learning_settings import LearningSettings
from adaptivespec.controller.policy import FixedK
from adaptivespec.controller.task import run_controller
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.engine import Engine, compute_thread
from adaptivespec.engine.loader import LoadedModels, load_runner
from adaptivespec.engine.packed_linear import torch_linears
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.spec_policy import SpecPolicy
from adaptivespec.engine.telemetry import Subscription

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
    bench.add_argument("--rates", type=numbers, default=None, help="requests per second (default 0.25,0.5,1)")
    bench.add_argument("--no-burst", action="store_true", help="skip the burst (every request at once)")
    bench.add_argument("--requests", type=int, default=None, help="per rate (default 32; --quick 10)")
    bench.add_argument("--lengths", type=Path, default=None, help="JSON: prompt_tokens / output_tokens")
    bench.add_argument(
        "--engines", default=None, help=f"any of {','.join(ENGINES)} (default: all it can run)"
    )
    bench.add_argument(
        "--k", type=int, default=2, help="K of ours-fixed and of openvino-spec's prompt lookup"
    )
    bench.add_argument(
        "--openvino-python", type=Path, default=None, help="the Python of an environment with openvino-genai"
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
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--traffic", choices=MIXES, default="chat", help="the prompts' mix (traffic_mixes.py)")
    bench.add_argument("--proposer", default="auto", help="ours' drafters, comma-separated")
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
    shape: TrafficShape
    engines: list[str]
    targets: Targets


def plan_of(args: argparse.Namespace) -> Plan:
    runnable = [e for e in ENGINES if args.openvino_python or not e.startswith("openvino")]
    engines = [e for e in args.engines.split(",") if e] if args.engines else runnable
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        raise SystemExit(f"unknown engines {unknown}; choose from {', '.join(ENGINES)}")
    if not args.openvino_python and any(e.startswith("openvino") for e in engines):
        raise SystemExit("the openvino engines need --openvino-python (see docs/benchmarks.md for the setup)")
    if args.quick and not args.engines:  # engines asked for by name are run, --quick or not
        engines = [e for e in engines if e not in PEERS]
    shape = TrafficShape.from_file(args.lengths) if args.lengths else _default_shape(args.quick)
    rates: list[float | None] = list(args.rates or ([0.5] if args.quick else [0.25, 0.5, 1.0]))
    if not args.no_burst:
        rates.append(None)
    count = args.requests or (10 if args.quick else 32)
    return Plan(rates, count, shape, engines, Targets(args.ttft_target_ms / 1e3, args.tpot_target_ms / 1e3))


def _default_shape(quick: bool) -> TrafficShape:
    return TrafficShape(Lengths(16, 512), Lengths(16, 128)) if quick else TrafficShape()


def run(args: argparse.Namespace) -> None:
    plan = plan_of(args)
    result = asyncio.run(_bench(args, plan))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


async def _bench(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    compute = compute_thread()
    long_tokens = args.long_prompt if args.long_prompt is not None else (1000 if args.quick else 2000)
    context = max(plan.shape.longest, long_tokens + prefill_stall.STREAM_PROMPT) + 8
    rows = max(args.max_batch, args.streams + 1)
    models = ModelConfig(
        target=args.target, draft=args.draft, proposer=args.proposer, device=args.device, dtype=args.dtype
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
    mix = (
        None
        if args.traffic == "chat"
        else traffic_prompts(args.traffic, loaded.tokenizer, plan.count, args.seed)
    )
    serving = EngineConfig(
        max_batch=args.max_batch,
        max_queued=config.max_queued,
        max_context=context,
        threads=args.threads,
        models=models,
    )
    adaptive = _controller(loaded)
    openvino = None
    if any(e.startswith("openvino") for e in plan.engines):
        openvino = OpenVINO.prepare(args.openvino_python, loaded.target.path, args.max_batch)
    harness = Harness(loaded, compute, serving, adaptive, args.k, openvino)
    report: dict[str, Any] = {
        "model": loaded.runner.model_key,
        "machine": machine(loaded.runner.hardware_key),
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
    print(
        f"{loaded.runner.model_key} on {loaded.runner.hardware_key}: {plan.count} requests per rate, "
        f"prompts {plan.shape.prompt.low}-{plan.shape.prompt.high}, outputs {plan.shape.output.low}-"
        f"{plan.shape.output.high} tokens",
        flush=True,
    )
    print(_HEADER, flush=True)
    try:
        for rate in plan.rates:
            traffic = requests(plan.shape, rate, plan.count, corpus, args.seed, prompts=mix)
            engines: dict[str, Any] = {}
            reference: list[list[int]] | None = None
            for name in plan.engines:
                served = await harness.server(name)(traffic)
                summary = summarize(served, plan.targets, reference)
                reference = reference or [s.tokens for s in served]
                engines[name] = asdict(summary)
                print(_row(rate, name, summary), flush=True)
            report["rates"].append({"rate_rps": rate, "burst": rate is None, "engines": engines})
        if harness.versions:
            report["machine"]["peers"] = harness.versions
        if long_tokens:
            report["chunked_prefill"] = await harness.stalls(corpus, args.streams, long_tokens)
    finally:
        adaptive.stop()
        compute.shutdown(wait=True)
    return report


_HEADER = (
    f"{'rate/s':>6} {'engine':<14} {'tok/s':>7} {'TTFT p50':>9} {'TTFT p99':>9} "
    f"{'ITL p50':>8} {'ITL p99':>8} {'goodput/s':>9} {'met':>5} {'mismatch':>8}"
)


def _row(rate: float | None, name: str, s: Summary) -> str:
    shown = "burst" if rate is None else f"{rate:g}"
    return (
        f"{shown:>6} {name:<14} {s.throughput_tok_s:>7.1f} {s.ttft_p50_ms:>9.0f} {s.ttft_p99_ms:>9.0f} "
        f"{s.itl_p50_ms:>8.1f} {s.itl_p99_ms:>8.1f} {s.goodput_rps:>9.3f} {s.met_targets:>5.2f} "
        f"{s.mismatches:>8}"
    )


Serve = Callable[[list[Request]], Coroutine[Any, Any, list[Served]]]


@dataclass(frozen=True, slots=True)
class Harness:
    """What every engine of the run shares: the loaded models, their thread, the controller."""

    loaded: LoadedModels
    compute: ThreadPoolExecutor
    config: EngineConfig  # ours; its max_batch is also the static server's batch
    adaptive: AdaptivePolicy
    fixed_k: int
    openvino: OpenVINO | None
    versions: dict[str, str] = field(default_factory=dict)  # of the peers, as they report them

    def server(self, name: str) -> Serve:
        if name.startswith("openvino"):
            return lambda traffic: self._serve_openvino(
                traffic, self.fixed_k if name == "openvino-spec" else 0
            )
        if name == "hf-static":
            return self._serve_static
        policies: dict[str, SpecPolicy] = {"ours-off": FixedK(0), "ours-fixed": FixedK(self.fixed_k)}
        policy = policies.get(name, self.adaptive.policy)
        return lambda traffic: self._serve_ours(policy, traffic)

    async def _serve_static(self, traffic: list[Request]) -> list[Served]:
        """transformers' model as it loads: our engine's packed linears are switched off for it."""
        pad = self.loaded.tokenizer.pad_token_id
        pad_id = int(pad if pad is not None else min(self.loaded.runner.eos_token_ids, default=0))
        model = self.loaded.runner.target.model
        with torch_linears([model]):
            return await static_batching.serve(model, pad_id, traffic, self.config.max_batch, self.compute)

    async def _serve_openvino(self, traffic: list[Request], lookup_k: int) -> list[Served]:
        if self.openvino is None:
            raise RuntimeError("the openvino engines need --openvino-python")
        served, versions = await asyncio.to_thread(self.openvino.serve, traffic, lookup_k)
        self.versions.update(versions)
        return served

    async def _serve_ours(self, policy: SpecPolicy, traffic: list[Request]) -> list[Served]:
        engine = Engine(self.loaded.runner, self.loaded.tokenizer, policy, self.config, compute=self.compute)
        await engine.start()
        if policy is self.adaptive.policy:
            self.adaptive.attach(engine)
        began = time.perf_counter()

        async def one(request: Request) -> Served:
            await asyncio.sleep(max(0.0, began + request.arrival - time.perf_counter()))
            params = SamplingParams(max_tokens=request.max_tokens, temperature=0.0, ignore_eos=True)
            served = Served(request, time.perf_counter(), [], [])
            async for event in engine.submit(request.prompt, params):
                if event.finish_reason == "error":
                    raise RuntimeError(f"a request failed: {event.error}")
                if event.token_ids:
                    served.chunk_times.append(time.perf_counter())
                    served.tokens.extend(event.token_ids)
            return served

        try:
            return list(await asyncio.gather(*(one(r) for r in traffic)))
        finally:
            self.adaptive.stop()
            await engine.stop()

    async def stalls(self, corpus: list[int], streams: int, long_tokens: int) -> dict[str, Any]:
        print(f"\na {long_tokens}-token prompt arrives into {streams} decoding streams (K=0):", flush=True)
        results = {}
        for whole in (True, False):
            stall = await prefill_stall.measure(
                self.loaded.runner, self.loaded.tokenizer, self.compute, self.config, corpus,
                streams=streams, long_tokens=long_tokens, whole=whole,
            )  # fmt: skip
            results[stall.chunking] = asdict(stall)
            print(
                f"  {stall.chunking:<6} steady ITL p99 {stall.steady_itl_p99_ms:.0f} ms, during its prefill "
                f"p99 {stall.long_prompt_itl_p99_ms:.0f} ms (max {stall.long_prompt_itl_max_ms:.0f}), "
                f"{stall.ratio:.2f}x; its TTFT {stall.long_prompt_ttft_ms:.0f} ms",
                flush=True,
            )
        paced = results["paced"]
        keys = ("steady_itl_p99_ms", "long_prompt_itl_p99_ms", "long_prompt_tokens", "streams")
        return {**{key: paced[key] for key in keys}, "paced": paced, "whole": results["whole"]}


class AdaptivePolicy:
    """One controller for every adaptive run, learning across rates as a daemon would."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.policy = controller.live
        self._task: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None

    def attach(self, engine: Engine) -> None:
        self.stop()
        self._subscription = engine.telemetry.subscribe()
        self._task = asyncio.create_task(run_controller(self.controller, self._subscription))

    def stop(self) -> None:
        """Stops listening, after learning from every step the engine already reported."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        while self._subscription is not None and not self._subscription.queue.empty():
            self.controller.ingest(self._subscription.queue.get_nowait())
        self._subscription = None


def _controller(loaded: LoadedModels) -> AdaptivePolicy:
    runner = loaded.runner
    settings = LearningSettings().capped(runner.max_spec_tokens)
    return AdaptivePolicy(
        Controller(runner.model_key, runner.hardware_key, ControllerConfig(settings=settings), runner.methods)
    )
