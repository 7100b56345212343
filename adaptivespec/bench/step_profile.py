"""`adaptivespec bench profile`: where one of our decode steps spends its time, by operator.

torch.profiler over a few steps of the runner at a fixed batch and context, after a
prefill and warm-up steps. Its counterpart for OpenVINO is `openvino_step_profile.py`, so
that `bench workload`'s peer comparison can say where the time goes on both sides.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from torch.profiler import ProfilerActivity, profile

from adaptivespec.bench.steps import prefill_rows, prompt_windows
from adaptivespec.config import DEFAULT_MODEL, DEVICES, DTYPES, LINEAR_CHOICES, EngineConfig, ModelConfig
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.loader import load_runner

WARM_UP_STEPS = 3


@dataclass(frozen=True, slots=True)
class OperatorShare:
    name: str
    ms_per_step: float  # self time
    share: float  # of all operators' self time


@dataclass(frozen=True, slots=True)
class StepProfile:
    model_key: str
    hardware_key: str
    batch: int
    k: int
    context: int
    step_ms: float  # median, timed by the runner, with the profiler on
    operators: list[OperatorShare]


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = kinds.add_parser("profile", help="one decode step's time by operator (torch.profiler)")
    parser.add_argument("--target", default=DEFAULT_MODEL)
    parser.add_argument("--draft", default=None, help="a draft model; without one, n-gram prompt lookup")
    parser.add_argument("--device", choices=DEVICES, default="auto")
    parser.add_argument("--dtype", choices=DTYPES, default="auto")
    parser.add_argument("--linear", choices=LINEAR_CHOICES, default="packed")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--top", type=int, default=12, help="operators to list")
    parser.add_argument("--json", type=Path, default=None)


def run(args: argparse.Namespace) -> None:
    for name in ("batch", "context", "steps", "top"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be at least 1, got {getattr(args, name)}")
    # The torch runtime's own steps (what this measures); `bench workload` takes --runtime.
    models = ModelConfig(
        target=args.target,
        draft=args.draft,
        device=args.device,
        dtype=args.dtype,
        linear=args.linear,
        runtime="torch",
    )
    horizon = args.context + (args.steps + WARM_UP_STEPS + 1) * (args.k + 1) + 1
    loaded = load_runner(
        EngineConfig(max_batch=args.batch, max_context=horizon, threads=args.threads, models=models)
    )
    runner = loaded.runner
    prefill_rows(runner, prompt_windows(loaded.tokenizer, held_out_documents(), args.batch, args.context))
    for _ in range(WARM_UP_STEPS):
        runner.decode(args.batch, args.k)
    seconds = []
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(args.steps):
            seconds.append(runner.decode(args.batch, args.k).step_seconds)
    events = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    operators = [
        OperatorShare(e.key, e.self_cpu_time_total / 1000 / args.steps, e.self_cpu_time_total / total)
        for e in events[: args.top]
    ]
    result = StepProfile(
        runner.model_key,
        runner.hardware_key,
        args.batch,
        args.k,
        args.context,
        statistics.median(seconds) * 1000,
        operators,
    )
    print(
        f"{result.model_key} on {result.hardware_key}, batch {args.batch}, K={args.k}, context {args.context}"
    )
    print(f"step {result.step_ms:.1f} ms median (profiler on)")
    for op in operators:
        print(f"  {op.name:<52} {op.ms_per_step:7.2f} ms {100 * op.share:5.1f}%")
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(result), indent=2))
