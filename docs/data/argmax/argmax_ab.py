"""The tokens' argmax through numpy against torch's own, on the CPU: neighbouring decode steps
of one runner, alternately one way and the other (which goes first alternates), over the same
rows, so drift falls on both alike. The ids are the same either way
(tests/engine/test_sampling.py); only the step's time differs.

    python docs/data/argmax/argmax_ab.py --runtime openvino --json docs/data/argmax/openvino.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from adaptivespec.bench.machine import machine
from adaptivespec.bench.traffic_mixes import prompts
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine import sampling
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.runner import PrefillItem

GREEDY = sampling.SamplingParams(max_tokens=1 << 20, temperature=0.0)
REFILL_AFTER = 160  # tokens a row writes before the rows take the next prompts
CASES = ((1, None, 0), (8, None, 0), (16, None, 0), (8, "ngram", 4), (8, "suffix", 8), (16, "ngram", 4))


def torch_argmax(x: torch.Tensor) -> torch.Tensor:
    return x.argmax(dim=-1)


def case(
    runner: HFRunner, pool: list[list[int]], batch: int, method: str | None, k: int, *, pairs: int
) -> dict[str, Any]:
    fast = sampling.last_argmax
    ratios, written, first = [], 0, 0
    for i in range(pairs):
        if i == 0 or written >= REFILL_AFTER:
            runner.forget_history()
            runner.prefill(0, [PrefillItem(pool[(first + r) % len(pool)], GREEDY, 0) for r in range(batch)])
            first, written = first + batch, 0
        seconds = {}
        for name in ("numpy", "torch") if i % 2 == 0 else ("torch", "numpy"):
            sampling.last_argmax = fast if name == "numpy" else torch_argmax  # type: ignore[assignment]
            began = time.perf_counter()
            out = runner.decode(batch, k, method)
            seconds[name] = time.perf_counter() - began
            written += max(len(tokens) for tokens in out.tokens)
        sampling.last_argmax = fast  # type: ignore[assignment]
        ratios.append(seconds["torch"] / seconds["numpy"])
    boot = np.random.default_rng(0).choice(ratios, (2000, len(ratios)))
    medians = np.median(boot, axis=1)
    return {
        "torch_over_numpy": statistics.median(ratios),
        "ci95": [float(np.percentile(medians, 2.5)), float(np.percentile(medians, 97.5))],
        "pairs": pairs,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runtime", default="openvino", choices=("openvino", "torch"))
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(2)
    config = EngineConfig(
        models=ModelConfig(proposer="ngram,suffix", runtime=args.runtime),
        max_batch=16,
        max_context=2048,
        threads=2,
    )
    loaded = load_runner(config, progress=False)
    pool = [p[-500:] for p in prompts("chat", loaded.tokenizer, 48, 0)]
    results = {}
    for batch, method, k in CASES:
        name = f"batch {batch} " + (f"{method} K {k}" if method else "off")
        results[name] = found = case(loaded.runner, pool, batch, method, k, pairs=args.pairs)
        low, high = found["ci95"]
        print(f"{name}: torch / numpy {found['torch_over_numpy']:.3f} [{low:.3f}, {high:.3f}]", flush=True)
    if args.json:
        out = {"machine": machine(loaded.runner.hardware_key), "runtime": args.runtime, "cases": results}
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
