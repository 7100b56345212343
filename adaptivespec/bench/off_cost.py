"""`adaptivespec bench off-cost`: what a loaded drafter costs a step the controller runs at K = 0.

Two runners share the target's weights: one with no drafter (a plain engine), one with the
drafter loaded. Their K = 0 steps alternate one by one on the same prompts at a fixed context
(each step's token is forgotten), so that the machine's drift falls on both alike and each
pair of neighbouring steps is a paired comparison. The figure is the median of the pairs'
ratios, with a seeded bootstrap 95% interval of that median.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import torch

from adaptivespec.bench.arguments import positive_integers
from adaptivespec.bench.machine import machine
from adaptivespec.bench.sibling_runners import model_free_proposer, sibling
from adaptivespec.bench.steps import prefill_rows, prompt_windows
from adaptivespec.config import DEFAULT_MODEL, DEMO_MODEL, EngineConfig, ModelConfig, ProposerKind
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import LoadedModels, load_runner
from adaptivespec.engine.suffix_proposer import suffix_available

DRAFTERS = ("ngram", "suffix", "copy", "draft")


def register(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = kinds.add_parser("off-cost", help="a K = 0 step with a drafter loaded against a plain engine's")
    bench.add_argument("--target", default=DEFAULT_MODEL)
    bench.add_argument(
        "--draft", default=None, help="the draft model of the `draft` drafter ('demo' with --target demo)"
    )
    bench.add_argument("--drafters", default="ngram,suffix", help=f"comma-separated, of {DRAFTERS}")
    bench.add_argument("--batches", type=positive_integers, default=[1, 8])
    bench.add_argument("--context", type=int, default=256)
    bench.add_argument("--steps", type=int, default=400, help="step pairs per drafter and batch")
    bench.add_argument("--seed", type=int, default=0, help="the bootstrap's")
    bench.add_argument("--json", type=Path, default=None)


def run(args: argparse.Namespace) -> None:
    drafters = [d for d in args.drafters.split(",") if d]
    if unknown := sorted(set(drafters) - set(DRAFTERS)):
        raise SystemExit(f"unknown drafters {unknown}: choose among {DRAFTERS}")
    if {"suffix", "copy"} & set(drafters) and not suffix_available():
        raise SystemExit("suffix and copy need arctic-inference: run ops/install-suffix.sh")
    with_draft = "draft" in drafters
    if with_draft and not (args.draft or args.target == DEMO_MODEL):
        raise SystemExit("the draft drafter needs --draft (or --target demo)")
    proposer: ProposerKind = "draft" if with_draft else "ngram"
    # The torch runtime's own steps (what this measures); `bench workload` takes --runtime.
    models = ModelConfig(
        target=args.target,
        draft=args.draft,
        proposer=proposer,
        device="cpu",
        dtype="float32",
        runtime="torch",
    )
    batch_rows = max(args.batches)
    config = EngineConfig(
        max_batch=batch_rows, max_context=args.context + 16, threads=args.threads, models=models
    )
    loaded = load_runner(config)
    rng = np.random.default_rng(args.seed)
    cases = []
    for batch in args.batches:
        prompts = prompt_windows(loaded.tokenizer, held_out_documents(), batch, args.context)
        for drafter in drafters:
            plain, loaded_with = _runner(loaded, config, None), _runner(loaded, config, drafter)
            cases.append(_case(plain, loaded_with, prompts, args.steps, rng) | {"drafter": drafter})
            case = cases[-1]
            print(
                f"batch {batch:>3} {drafter:<8} plain {case['plain_ms']:.2f} ms, with it "
                f"{case['loaded_ms']:.2f} ms: ratio {case['ratio']:.4f} "
                f"[{case['ratio_ci'][0]:.4f}, {case['ratio_ci'][1]:.4f}]",
                flush=True,
            )
    result = {
        "machine": machine(loaded.runner.hardware_key),
        "scenario": {"target": args.target, "context": args.context, "steps": args.steps},
        "cases": cases,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


def _runner(loaded: LoadedModels, config: EngineConfig, drafter: str | None) -> HFRunner:
    if drafter == "draft":
        return loaded.runner  # loaded with the draft model, which only this runner drives
    return sibling(loaded.runner, model_free_proposer(drafter or "off", config), config)


@torch.inference_mode()
def _case(
    plain: HFRunner, loaded: HFRunner, prompts: list[list[int]], steps: int, rng: np.random.Generator
) -> dict[str, Any]:
    batch = len(prompts)
    for runner in (plain, loaded):
        prefill_rows(runner, prompts)
        runner.decode(batch, 0)  # warm-up
        runner.rows.rewind(batch, 1)
    times: dict[str, list[float]] = {"plain": [], "loaded": []}
    for i in range(steps):
        # Which goes first alternates, so that neither always follows the other.
        order = [("plain", plain), ("loaded", loaded)][:: 1 if i % 2 == 0 else -1]
        for name, runner in order:
            times[name].append(runner.decode(batch, 0).step_seconds)
            runner.rows.rewind(batch, 1)  # the same context every step
    ratios = np.array(times["loaded"]) / np.array(times["plain"])
    medians = [float(np.median(rng.choice(ratios, size=len(ratios)))) for _ in range(2000)]
    return {
        "batch": batch,
        "plain_ms": statistics.median(times["plain"]) * 1e3,
        "loaded_ms": statistics.median(times["loaded"]) * 1e3,
        "ratio": float(np.median(ratios)),
        "ratio_ci": [float(np.quantile(medians, 0.025)), float(np.quantile(medians, 0.975))],
        "pairs": steps,
    }
