"""Where OpenVINO's decode step spends its time: per-node counters over a batch of steps.

The counterpart of `adaptivespec bench profile` for the peer in `bench workload`. Like
`openvino_worker.py` it imports nothing from adaptivespec and runs with the Python of the
OpenVINO environment:

    ~/ovenv/bin/python adaptivespec/bench/openvino_step_profile.py EXPORTED_DIR --batch 8 --context 256

It runs the exported (stateful) model directly with `PERF_COUNT`: a prefill of `context`
random tokens per row, then greedy decode steps of one token per row. It prints the median
step time and each node type's share of the summed node times. The continuous-batching
pipeline that `bench workload` drives runs the same graph with paged attention in place of
the stateful cache; it keeps its requests to itself, so this is the closest step it exposes.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--precision", default="f32", help="INFERENCE_PRECISION_HINT (f32, as ours)")
    args = parser.parse_args()
    properties = {"PERF_COUNT": "YES", "INFERENCE_PRECISION_HINT": args.precision, "NUM_STREAMS": "1"}
    compiled = ov.Core().compile_model(str(args.model_dir / "openvino_model.xml"), "CPU", properties)
    request = compiled.create_infer_request()
    prompt = np.random.default_rng(0).integers(100, 40_000, (args.batch, args.context))
    tokens = _greedy(_infer(request, prompt, 0))
    seconds, shares = [], collections.Counter[str]()
    for step in range(args.steps + 3):  # the first three warm up
        began = time.perf_counter()
        logits = _infer(request, tokens, args.context + step)
        if step >= 3:
            seconds.append(time.perf_counter() - began)
            shares.update(_node_shares(request))
        tokens = _greedy(logits)
    print(
        f"batch {args.batch}, context {args.context}: step {statistics.median(seconds) * 1000:.1f} ms median"
    )
    for kind, share in shares.most_common(8):
        print(f"  {kind:<40} {100 * share / args.steps:5.1f}%")


def _infer(request: Any, tokens: np.ndarray, past: int) -> np.ndarray:
    batch, width = tokens.shape
    request.infer(
        {
            "input_ids": tokens,
            "attention_mask": np.ones((batch, past + width), np.int64),
            "position_ids": np.broadcast_to(np.arange(past, past + width), (batch, width)).copy(),
            "beam_idx": np.arange(batch, dtype=np.int32),
        }
    )
    return np.asarray(request.get_tensor("logits").data)


def _greedy(logits: np.ndarray) -> np.ndarray:
    return logits[:, -1].argmax(-1)[:, None].astype(np.int64)


def _node_shares(request: Any) -> collections.Counter[str]:
    """Shares, not times: this plugin's per-node times add up to more than the step's wall time."""
    times = collections.Counter[str]()
    for node in request.profiling_info:
        times[node.node_type] += node.real_time.total_seconds()
    total = sum(times.values())
    return collections.Counter({kind: t / total for kind, t in times.items()})


if __name__ == "__main__":
    main()
