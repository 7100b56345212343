"""Each row verifying its own drafts against every row verifying the longest row's width, on
the openvino runtime: neighbouring decode steps of one runner, alternately one way and the
other (which goes first alternates), over the same rows, so drift falls on both alike. The
tokens are the same either way (tests/engine/test_openvino_runtime.py); only the time differs.

    python docs/data/verify-width/ragged_ab.py --json docs/data/verify-width/ragged-ab.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from adaptivespec.bench.machine import machine
from adaptivespec.bench.traffic_mixes import prompts
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.hf_runner import HFRunner
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.runner import PrefillItem
from adaptivespec.engine.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=1 << 20, temperature=0.0)
NEW_TOKENS = 160  # each row's budget before the rows take the next prompts


def fill(runner: HFRunner, pool: list[list[int]], first: int, batch: int) -> None:
    runner.forget_history()
    runner.prefill(0, [PrefillItem(pool[(first + r) % len(pool)], GREEDY, 0) for r in range(batch)])


def paired(
    runner: HFRunner, pool: list[list[int]], batch: int, k: int, *, method: str, pairs: int
) -> dict[str, Any]:
    target = runner.target
    own = target.forward

    def padded(*args: Any, counts: np.ndarray | None = None, **kwargs: Any) -> torch.Tensor:
        return own(*args, **kwargs)  # every row computes the step's width

    ways: dict[str, Callable[..., torch.Tensor]] = {"own": own, "padded": padded}
    ratios, own_widths, widths = [], [], []
    first, made = 0, 0
    fill(runner, pool, first, batch)
    for i in range(pairs):
        seconds = {}
        for name in ("own", "padded") if i % 2 == 0 else ("padded", "own"):
            target.forward = ways[name]  # type: ignore[method-assign]
            began = time.perf_counter()
            out = runner.decode(batch, k, method)
            seconds[name] = time.perf_counter() - began
            if name == "own" and out.width:
                own_widths.append(out.verified_width or out.width)
                widths.append(out.width)
            made += max(len(tokens) for tokens in out.tokens)
        target.forward = own  # type: ignore[method-assign]
        ratios.append(seconds["padded"] / seconds["own"])
        if made >= NEW_TOKENS:
            first, made = first + batch, 0
            fill(runner, pool, first, batch)
    rng = np.random.default_rng(0)
    boot = [float(np.median(rng.choice(ratios, len(ratios)))) for _ in range(2000)]
    return {
        "padded_over_own": statistics.median(ratios),
        "ci95": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
        "mean_width": statistics.mean(widths) if widths else 0.0,
        "mean_own_width": statistics.mean(own_widths) if own_widths else 0.0,
        "pairs": pairs,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=120)
    parser.add_argument("--traffic", default="chat")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(2)
    config = EngineConfig(
        models=ModelConfig(proposer="ngram,suffix", runtime="openvino"),
        max_batch=8,
        max_context=2048,
        threads=2,
    )
    loaded = load_runner(config, progress=False)
    pool = [p[-700:] for p in prompts(args.traffic, loaded.tokenizer, 32, 0)]
    cases = {}
    for batch in (4, 8):
        for method, k in (("ngram", 4), ("ngram", 8), ("suffix", 8)):
            case = paired(loaded.runner, pool, batch, k, method=method, pairs=args.pairs)
            cases[f"batch {batch} {method} K {k}"] = case
            print(
                f"batch {batch} {method} K {k}: padded / own {case['padded_over_own']:.3f} "
                f"[{case['ci95'][0]:.3f}, {case['ci95'][1]:.3f}], width {case['mean_width']:.2f}, "
                f"own {case['mean_own_width']:.2f}",
                flush=True,
            )
    if args.json:
        result = {"machine": machine(loaded.runner.hardware_key), "traffic": args.traffic, "cases": cases}
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
