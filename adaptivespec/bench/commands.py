"""`adaptivespec bench ...`: registers every subcommand and runs the small ones itself.

The rule for this package: a subcommand with more than a screen of code has its own module,
named after it (`bench control` -> `control.py`, with `register` and `run`; `engine_bench.py`
and `controller_bench.py` where the plain name is one of our packages); everything else
is a helper named for what it is (`oracle.py`, `interleaved.py`, `hf_loop.py`). Each
command prints a table and can write JSON for docs/results.md.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from adaptivespec.bench import (
    calibrate,
    control,
    controller_bench,
    copy_ceiling,
    coupling,
    drafters,
    engine_bench,
    fleet,
    off_cost,
    serve,
    step_profile,
    step_variants,
    workload,
)
from adaptivespec.bench.arguments import draft_lengths, positive_integers
from adaptivespec.bench.machine import machine
from adaptivespec.bench.steps import acceptance_at_k1, compare_with_dynamic_cache, prompt_windows, step_times
from adaptivespec.config import DEMO_MODEL, DEVICES, DTYPES, EngineConfig, ModelConfig
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.loader import LoadedModels, load_runner


def parser(common: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`adaptivespec bench`'s own command line: the top-level one hands its arguments over
    unparsed, so that nothing here is imported unless a bench command runs."""
    bench = argparse.ArgumentParser(
        prog="adaptivespec bench", description="measure the engine side by side", parents=[common]
    )
    kinds = bench.add_subparsers(dest="bench", required=True)
    steps = kinds.add_parser("steps", help="decode-step time against batch size and K")
    steps.add_argument("--batches", type=positive_integers, default=[1, 2, 4, 8, 16, 32, 64])
    steps.add_argument("--ks", type=draft_lengths, default=[0, 1, 2, 4, 8])
    steps.add_argument("--context", type=int, default=128)
    steps.add_argument("--steps", type=int, default=8)
    cache = kinds.add_parser("cache", help="our slot KV cache against transformers' DynamicCache")
    cache.add_argument("--batch", type=int, default=16)
    cache.add_argument("--contexts", type=positive_integers, default=[128, 1024])
    cache.add_argument("--steps", type=int, default=10)
    accept = kinds.add_parser("acceptance", help="greedy acceptance at K=1 on held-out text")
    accept.add_argument("--prompts", type=int, default=32)
    accept.add_argument("--prompt-len", type=int, default=64)
    accept.add_argument("--steps", type=int, default=64)
    control.register(kinds)
    coupling.register(kinds)
    drafters.register(kinds)
    copy_ceiling.register(kinds)
    off_cost.register(kinds)
    fleet.register(kinds)
    calibrate.register(kinds)
    controller_bench.register(kinds)
    serve.register(kinds)
    engine_bench.register(kinds)
    workload.register(kinds)
    step_variants.register(kinds)
    step_profile.register(kinds)
    for sub in kinds.choices.values():  # the same threads on every side, recorded in each JSON
        sub.add_argument(
            "--threads",
            type=int,
            default=0,
            help="torch threads (default 0: the CPUs others leave free)",
        )
    for sub in (steps, cache, accept):
        sub.add_argument("--target", default=DEMO_MODEL)
        sub.add_argument("--draft", default=DEMO_MODEL)
        sub.add_argument("--device", choices=DEVICES, default="auto")
        sub.add_argument("--dtype", choices=DTYPES, default="auto")
        sub.add_argument("--json", type=Path, default=None, help="also write the results here")
    return bench


def run(args: argparse.Namespace) -> None:
    commands: dict[str, Callable[[argparse.Namespace], object]] = {
        "control": control.run,
        "coupling": coupling.run,
        "drafters": drafters.run,
        "copy-ceiling": copy_ceiling.run,
        "off-cost": off_cost.run,
        "fleet": fleet.run,
        "calibrate": calibrate.run,
        "controller": controller_bench.run,
        "serve": serve.run,
        "engine": engine_bench.run,
        "workload": workload.run,
        "variants": step_variants.run,
        "profile": step_profile.run,
    }
    if args.bench in commands:
        commands[args.bench](args)
        return
    handlers = {"steps": _steps, "cache": _cache, "acceptance": _acceptance}
    result = {"machine": machine(), **handlers[args.bench](args)}
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


def _load(args: argparse.Namespace, max_batch: int, max_context: int) -> LoadedModels:
    # The torch runtime's own steps (what this measures); `bench workload` takes --runtime.
    models = ModelConfig(
        target=args.target, draft=args.draft, device=args.device, dtype=args.dtype, runtime="torch"
    )
    config = EngineConfig(max_batch=max_batch, max_context=max_context, threads=args.threads, models=models)
    return load_runner(config)


def _steps(args: argparse.Namespace) -> dict[str, Any]:
    horizon = args.context + (args.steps + 2) * (max(args.ks) + 1)
    loaded = _load(args, max(args.batches), horizon + 1)
    texts = held_out_documents()
    rows = []
    print(f"{'batch':>5} {'K':>2} {'ms/step':>8} {'tok/row/step':>12} {'tok/s':>8}")
    for batch in args.batches:
        prompts = prompt_windows(loaded.tokenizer, texts, batch, args.context)
        for timing in step_times(loaded.runner, prompts, args.ks, args.steps):
            rows.append({**asdict(timing), "tok_s": timing.tok_s})
            print(
                f"{timing.batch:>5} {timing.k:>2} {timing.median_ms:>8.1f} "
                f"{timing.tokens_per_step:>12.2f} {timing.tok_s:>8.0f}",
                flush=True,
            )
    return {"model_key": loaded.runner.model_key, "context": args.context, "steps": rows}


def _cache(args: argparse.Namespace) -> dict[str, Any]:
    loaded = _load(args, args.batch, max(args.contexts) + 2)
    texts = held_out_documents()
    rows = []
    print(f"{'batch':>5} {'context':>7} {'ours ms':>8} {'DynamicCache ms':>15} {'ratio':>6}")
    for context in args.contexts:
        prompts = prompt_windows(loaded.tokenizer, texts, args.batch, context)
        result = compare_with_dynamic_cache(loaded.runner, prompts, args.steps)
        rows.append({**asdict(result), "ratio": result.ratio})
        print(
            f"{result.batch:>5} {result.context:>7} {result.ours_ms:>8.1f} "
            f"{result.dynamic_cache_ms:>15.1f} {result.ratio:>6.2f}",
            flush=True,
        )
    return {"model_key": loaded.runner.model_key, "cases": rows}


def _acceptance(args: argparse.Namespace) -> dict[str, Any]:
    loaded = _load(args, args.prompts, args.prompt_len + 2 * args.steps + 4)
    prompts = prompt_windows(loaded.tokenizer, held_out_documents(), args.prompts, args.prompt_len)
    rate = acceptance_at_k1(loaded.runner, prompts, args.steps)
    print(f"greedy acceptance at K=1 over {args.prompts} held-out prompts x {args.steps} steps: {rate:.3f}")
    return {"model_key": loaded.runner.model_key, "acceptance_k1": rate}
