"""What handing OpenVINO a pass's inputs costs: `infer` given a dict of arrays (shared), against
each input set by port as a tensor over its array and `infer` given nothing, alternating on
the same request and the same inputs (a decode step's, captured from the runner).

For each batch size, blocks of 10 calls alternate between the two ways (which goes first
alternates); the figures are the medians of all calls, with the range of the blocks' medians.
The logits of both ways are checked equal.

    python docs/data/openvino-call/infer_call.py --json docs/data/openvino-call/infer-call.json
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
import openvino as ov

from adaptivespec.bench.machine import machine
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.loader import load_runner
from adaptivespec.engine.openvino_target import PASS_INPUTS, OpenVINOTarget
from adaptivespec.engine.runner import PrefillItem
from adaptivespec.engine.sampling import SamplingParams

BATCHES = (1, 4, 10, 16)
PROMPT = 300


def captured_inputs(target: OpenVINOTarget, step: Callable[[], object]) -> dict[str, np.ndarray]:
    """The inputs of the pass `step` runs, as `_run` left them on the request (the cache's
    blocks aside)."""
    step()
    request = target.request
    return {
        port.get_any_name(): request.get_input_tensor(i).data.copy()
        for i, port in enumerate(request.model_inputs)
        if port.get_any_name() in PASS_INPUTS
    }


def measure(runner: Any, target: OpenVINOTarget, batch: int, blocks: int) -> dict[str, Any]:
    """Both ways on a decode step's inputs over `batch` rows of PROMPT tokens."""
    # A request of its own over the target's compiled model and cache, so that the inputs it is
    # handed here never replace the buffers the target's own request reads.
    request = target.request.get_compiled_model().create_infer_request()
    for name, array in target.cache.arrays.items():
        request.set_tensor(name, ov.Tensor(array, shared_memory=True))
    ports = {port.get_any_name(): i for i, port in enumerate(request.model_inputs)}
    items = [
        PrefillItem(list(range(100 + r, 100 + r + PROMPT)), SamplingParams(max_tokens=64), seed=0)
        for r in range(batch)
    ]
    runner.prefill(0, items)
    inputs = captured_inputs(target, lambda: runner.decode(batch, 0))

    def as_dict() -> np.ndarray:
        return request.infer(inputs, share_inputs=True, share_outputs=True)[0]

    def by_port() -> np.ndarray:
        for name, array in inputs.items():
            request.set_input_tensor(ports[name], ov.Tensor(array, shared_memory=True))
        return request.infer(share_outputs=True)[0]

    same = bool(np.array_equal(as_dict().copy(), by_port().copy()))
    ways = {"dict": as_dict, "ports": by_port}
    calls: dict[str, list[float]] = {name: [] for name in ways}
    medians: dict[str, list[float]] = {name: [] for name in ways}
    for b in range(blocks):
        for name in list(ways) if b % 2 == 0 else list(ways)[::-1]:
            times = []
            for _ in range(10):
                began = time.perf_counter()
                ways[name]()
                times.append(time.perf_counter() - began)
            calls[name] += times
            medians[name].append(statistics.median(times))
    row: dict[str, Any] = {"batch": batch, "logits_equal": same}
    for name in ways:
        row[f"{name}_ms"] = statistics.median(calls[name]) * 1e3
        row[f"{name}_block_range_ms"] = [min(medians[name]) * 1e3, max(medians[name]) * 1e3]
    row["saved_ms"] = row["dict_ms"] - row["ports_ms"]
    paired = [d - p for d, p in zip(medians["dict"], medians["ports"], strict=True)]
    row["saved_block_median_ms"] = statistics.median(paired) * 1e3
    row["saved_block_range_ms"] = [min(paired) * 1e3, max(paired) * 1e3]
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    config = EngineConfig(
        models=ModelConfig(runtime="openvino", proposer="ngram"),
        max_batch=max(BATCHES),
        max_queued=max(BATCHES),
        max_context=1024,
        threads=2,
    )
    runner = load_runner(config, progress=False).runner
    target = runner.target
    assert isinstance(target, OpenVINOTarget)
    rows = []
    for batch in BATCHES:
        row = measure(runner, target, batch, args.blocks)
        rows.append(row)
        low, high = row["saved_block_range_ms"]
        print(
            f"batch {batch}: dict {row['dict_ms']:.3f} ms, ports {row['ports_ms']:.3f} ms, saved "
            f"{row['saved_ms']:.3f} ms (blocks paired: median {row['saved_block_median_ms']:.3f}, "
            f"[{low:.3f}, {high:.3f}]); logits equal: {row['logits_equal']}",
            flush=True,
        )
    if args.json:
        report = {"machine": machine(runner.hardware_key), "openvino": ov.get_version()}
        args.json.write_text(json.dumps(report | {"blocks": args.blocks, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
