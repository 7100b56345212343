"""What a verify pass costs by the tokens it feeds, on the openvino runtime (default model).

One OpenVINO forward of the target per case, rows at context 256, cases alternating over the
repeats; median [min, max] milliseconds. A row of T tokens is the verify of T - 1 drafts;
"ragged" cases feed each row its own count, as a verify of rows that found different drafts.

    python docs/data/verify-width/width_cost.py --json docs/data/verify-width/width-cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from adaptivespec.bench.machine import machine
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.loader import load_runner

CASES = {
    "b1 T1": [1],
    "b1 T2": [2],
    "b1 T3": [3],
    "b1 T5": [5],
    "b1 T9": [9],
    "b4 T1": [1] * 4,
    "b4 T2": [2] * 4,
    "b4 T5": [5] * 4,
    "b4 ragged 5,1,1,1": [5, 1, 1, 1],
    "b4 ragged 5,3,3,2": [5, 3, 3, 2],
    "b8 T1": [1] * 8,
    "b8 T3": [3] * 8,
    "b8 T5": [5] * 8,
    "b8 T9": [9] * 8,
    "b8 ragged 9,3,3,3,2,2,1,1": [9, 3, 3, 3, 2, 2, 1, 1],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(2)
    config = EngineConfig(
        models=ModelConfig(proposer="ngram", runtime="openvino"), max_batch=8, max_context=1024, threads=2
    )
    runner = load_runner(config, progress=False).runner
    target = runner.target
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for _ in range(args.repeats):
        for name, per_row in CASES.items():
            counts = np.array(per_row, dtype=np.int64)
            rows = np.arange(len(counts))
            starts = np.full(len(counts), args.context, dtype=np.int64)
            ids = rng.integers(100, 20000, int(counts.sum()))
            began = time.perf_counter()
            target._run(rows, starts, counts, ids, np.arange(int(counts.sum())))  # noqa: SLF001
            times[name].append((time.perf_counter() - began) * 1e3)
    result = {
        "machine": machine(runner.hardware_key),
        "context": args.context,
        "repeats": args.repeats,
        "ms": {
            name: {"median": statistics.median(v), "min": min(v), "max": max(v), "tokens": sum(CASES[name])}
            for name, v in times.items()
        },
    }
    for name, row in result["ms"].items():
        print(
            f"{name:28} {row['tokens']:3} tokens {row['median']:6.1f} ms [{row['min']:.1f}, {row['max']:.1f}]"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
