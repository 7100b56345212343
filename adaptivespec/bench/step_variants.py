"""`adaptivespec bench variants`: one decode step built two ways, side by side, with the outputs.

Each variant (packed GQA attention against transformers' SDPA, a compiled step against an
eager one, oneDNN-packed linear weights against torch's linear) runs the same greedy
requests from the same fresh prefill, in alternation over the repeats, so drift on a noisy
machine falls on every variant alike. The report gives median step times, the speed-up over
the first variant, and how many rows' tokens differ from the first variant's: a variant
that changes the output is not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adaptivespec.bench.arguments import draft_lengths, positive_integers
from adaptivespec.bench.steps import prefill_rows, prompt_windows
from adaptivespec.config import DEFAULT_MODEL, DEVICES, DTYPES, EngineConfig, ModelConfig
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.packed_gqa import use_attention
from adaptivespec.engine.packed_linear import packed_layers, use_packed_linears


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    apply: Callable[[HFRunner], None]  # turns the variant on for the runner's models


@dataclass(frozen=True, slots=True)
class VariantCase:
    batch: int
    k: int
    context: int
    median_ms: dict[str, float]  # per variant
    speedup: dict[str, float]  # the first variant's median over each variant's
    mismatched_rows: dict[str, int]  # rows whose greedy tokens differ from the first variant's
    setup_s: dict[str, float]  # what turning each variant on took in this case (compiling, the first time)


def attention_variants() -> list[Variant]:
    return [
        Variant("sdpa", lambda runner: use_attention(runner.models, packed=False)),
        Variant("packed-gqa", lambda runner: use_attention(runner.models, packed=True)),
    ]


def compile_variants() -> list[Variant]:
    """The eager step with torch's linears, with packed ones (where the runner has them), and
    the compiled step, which traces torch's linears (inductor freezes and prepacks them itself)."""

    def eager(packed: bool) -> Callable[[HFRunner], None]:
        def apply(runner: HFRunner) -> None:
            runner.run_compiled(False)
            use_packed_linears(runner.models, on=packed)

        return apply

    def compiled(runner: HFRunner) -> None:
        use_packed_linears(runner.models, on=False)
        if runner.cached is not None and runner.cached.compiled is None:
            runner.compile()
        runner.run_compiled(True)

    return [Variant("eager", eager(False)), Variant("packed", eager(True)), Variant("compiled", compiled)]


def linear_variants() -> list[Variant]:
    """Needs a runner loaded with `linear = "packed"`: the dense weights stay beside the packed ones."""
    return [
        Variant("torch", lambda runner: use_packed_linears(runner.models, on=False)),
        Variant("packed", lambda runner: use_packed_linears(runner.models, on=True)),
    ]


VARIANTS: dict[str, Callable[[], list[Variant]]] = {
    "attention": attention_variants,
    "compile": compile_variants,
    "linear": linear_variants,
}


def compare(
    runner: HFRunner, prompts: list[list[int]], k: int, *, steps: int, variants: list[Variant], repeats: int
) -> VariantCase:
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    tokens: dict[str, list[list[int]]] = {}
    setup = dict.fromkeys(times, 0.0)
    for _ in range(repeats):
        for variant in variants:
            began = time.perf_counter()
            variant.apply(runner)
            setup[variant.name] += time.perf_counter() - began
            emitted, seconds = _decode_run(runner, prompts, k, steps)
            times[variant.name].extend(seconds)
            tokens.setdefault(variant.name, emitted)
    medians = {name: statistics.median(t) * 1000 for name, t in times.items()}
    first = variants[0].name
    speedup = {name: medians[first] / ms for name, ms in medians.items()}
    differ = {name: _rows_differing(tokens[first], rows) for name, rows in tokens.items()}
    return VariantCase(len(prompts), k, len(prompts[0]), medians, speedup, differ, setup)


def _rows_differing(expected: list[list[int]], got: list[list[int]]) -> int:
    return sum(a != b for a, b in zip(expected, got, strict=True))


def _decode_run(
    runner: HFRunner, prompts: list[list[int]], k: int, steps: int
) -> tuple[list[list[int]], list[float]]:
    """Greedy tokens per row and the time of every step but the first (warm-up)."""
    prefill_rows(runner, prompts)
    emitted: list[list[int]] = [[] for _ in prompts]
    seconds = []
    for step in range(steps + 1):
        out = runner.decode(len(prompts), k)
        for row, new in zip(emitted, out.tokens, strict=True):
            row.extend(new)
        if step:
            seconds.append(out.step_seconds)
    return emitted, seconds


def _cells(case: VariantCase, name: str) -> str:
    return (
        f"{case.median_ms[name]:>15.1f} {case.speedup[name]:>5.2f} "
        f"{case.mismatched_rows[name]:>4} {case.setup_s[name]:>7.1f}"
    )


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = kinds.add_parser("variants", help="one decode step built two ways: step time and outputs")
    parser.add_argument("--compare", choices=tuple(VARIANTS), default="attention")
    parser.add_argument("--target", default=DEFAULT_MODEL)
    parser.add_argument("--draft", default=None, help="a draft model; without one, n-gram prompt lookup")
    parser.add_argument("--device", choices=DEVICES, default="auto")
    parser.add_argument("--dtype", choices=DTYPES, default="auto")
    parser.add_argument("--batches", type=positive_integers, default=[1, 8, 32])
    parser.add_argument("--ks", type=draft_lengths, default=[0, 4])
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant, alternating")
    parser.add_argument("--json", type=Path, default=None)


def run(args: argparse.Namespace) -> None:
    horizon = args.context + (args.steps + 2) * (max(args.ks) + 1) + 1
    # The torch runtime's own steps (what this measures); `bench workload` takes --runtime.
    models = ModelConfig(
        target=args.target, draft=args.draft, device=args.device, dtype=args.dtype, runtime="torch"
    )
    loaded = load_runner(
        EngineConfig(max_batch=max(args.batches), max_context=horizon, threads=args.threads, models=models)
    )
    runner = loaded.runner
    if not isinstance(runner, HFRunner):
        raise SystemExit("bench variants needs the hf runner")
    if args.compare == "linear" and not packed_layers(runner.models):
        raise SystemExit("no linear layer was packed: oneDNN packing needs a CPU and float32 or bfloat16")
    variants = VARIANTS[args.compare]()
    cases = []
    header = " ".join(f"{v.name + ' ms':>15} {'x':>5} {'diff':>4} {'setup s':>7}" for v in variants)
    print(f"{'batch':>5} {'K':>2} {header}")
    for batch in args.batches:
        prompts = prompt_windows(loaded.tokenizer, held_out_documents(), batch, args.context)
        for k in args.ks:
            case = compare(runner, prompts, k, steps=args.steps, variants=variants, repeats=args.repeats)
            cases.append(case)
            cells = " ".join(_cells(case, v.name) for v in variants)
            print(f"{batch:>5} {k:>2} {cells}", flush=True)
    report: dict[str, Any] = {
        "model_key": runner.model_key,
        "hardware_key": runner.hardware_key,
        "compare": args.compare,
        "cases": [asdict(c) for c in cases],
    }
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
