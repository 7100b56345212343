"""Converted graphs side by side: one batch-1 decode step's OpenVINO infer, ours against
optimum's export of the same weights (what OpenVINO GenAI serves), both through the paged pass
and compiled alike (f32, f32 cache, the same threads).

Each graph is compiled alone in a process of its own: in one process, whichever model is
compiled first ran about 3% slower than the others whatever its graph, which would read as a
difference between graphs. The processes alternate in rounds, so that the machine's drift
falls on every graph alike; each runs the same step (one token at a past of P tokens) 300
times a past length, and reports its median. Runtime op counts come from the compiled model.

    python docs/data/batch1-host/export_graphs.py --openvino-python OVENV/bin/python \
        --before OLD_CACHE/model.xml --json docs/data/batch1-host/export-graphs.json

`--before`: an IR converted by an earlier version (its cache folder), to compare with today's.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import openvino._offline_transformations as passes
import torch
from transformers import AutoConfig

from adaptivespec.bench.machine import machine
from adaptivespec.bench.openvino_peer import OpenVINO
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.kvcache import CacheShape
from adaptivespec.engine.model_sources import resolve_models
from adaptivespec.engine.openvino_export import BLOCK_SIZE, exported_model, f32_blocks, paged_model

THREADS = 2
STEPS = 300
PASTS = (50, 300)


def optimum_paged(xml: Path, config: Any) -> Any:
    """Optimum's export through the paged pass, its cache blocks as ours (f32, 32 tokens)."""
    model = ov.Core().read_model(xml)
    passes.paged_attention_transformation(model)
    f32_blocks(model, config)
    model.validate_nodes_and_infer_types()
    return model


def step_inputs(names: list[str], past: int) -> dict[str, np.ndarray]:
    blocks = past // BLOCK_SIZE + 1
    every = {
        "input_ids": np.array([42], np.int64),
        "position_ids": np.array([past], np.int64),
        "past_lens": np.array([past], np.int32),
        "subsequence_begins": np.array([0, 1], np.int32),
        "block_indices": np.arange(blocks, dtype=np.int32),
        "block_indices_begins": np.array([0, blocks], np.int32),
        "max_context_len": np.array(past + 1, np.int32),
        "logits_indices": np.array([0], np.int64),
    }
    return {name: every[name] for name in names if name in every}


def graphs(only: str, before: Path | None, openvino_python: Path) -> tuple[Any, CacheShape]:
    config = EngineConfig(threads=THREADS, max_batch=4, models=ModelConfig(runtime="openvino"))
    source, _ = resolve_models(config.models, progress=False)
    hf_config = AutoConfig.from_pretrained(source.path)
    shape = CacheShape.from_config(hf_config, 1, 1)
    if only == "ours":
        return paged_model(exported_model(source.path, source.key, hf_config), hf_config), shape
    if only == "ours_before" and before is not None:
        return paged_model(before, hf_config), shape
    peer = OpenVINO.prepare(openvino_python, source.path, 32)
    return optimum_paged(peer.model_dir / "openvino_model.xml", hf_config), shape


def time_alone(only: str, before: Path | None, openvino_python: Path) -> dict[str, Any]:
    """This process compiles one graph and times its step at each past length."""
    torch.set_num_threads(THREADS)
    graph, shape = graphs(only, before, openvino_python)
    properties = {
        "INFERENCE_PRECISION_HINT": "f32",
        "KV_CACHE_PRECISION": "f32",
        "INFERENCE_NUM_THREADS": THREADS,
    }
    model = ov.Core().compile_model(graph, "CPU", properties)
    runtime_ops = model.get_runtime_model().get_ops()
    kinds = collections.Counter(op.get_rt_info()["layerType"].astype(str) for op in runtime_ops)
    request = model.create_infer_request()
    rng = np.random.default_rng(0)
    for port in model.inputs:
        if port.get_any_name().startswith(("key_cache.", "value_cache.")):
            dims = (64, shape.kv_heads, BLOCK_SIZE, shape.head_dim)
            request.set_tensor(port.get_any_name(), ov.Tensor(rng.random(dims, dtype=np.float32)))
    medians = {}
    for past in PASTS:
        feed = step_inputs([port.get_any_name() for port in model.inputs], past)
        for _ in range(10):
            request.infer(feed)
        times = []
        for _ in range(STEPS):
            began = time.perf_counter()
            request.infer(feed)
            times.append((time.perf_counter() - began) * 1e3)
        medians[str(past)] = statistics.median(times)
    return {"ops": dict(sorted(kinds.items(), key=lambda item: -item[1])), "median_ms": medians}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--openvino-python", type=Path, required=True)
    parser.add_argument("--before", type=Path, help="an IR from an earlier conversion of the same model")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--alone", help=argparse.SUPPRESS)  # a child process: the graph it times
    args = parser.parse_args()
    if args.alone:
        print(json.dumps(time_alone(args.alone, args.before, args.openvino_python)))
        return
    names = ["ours", "optimum"] + (["ours_before"] if args.before else [])
    command = [sys.executable, __file__, "--openvino-python", str(args.openvino_python), "--json", "-"]
    command += ["--before", str(args.before)] if args.before else []
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            out = subprocess.run([*command, "--alone", name], check=True, capture_output=True, text=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(name, runs[name][-1]["median_ms"], flush=True)
    torch.set_num_threads(THREADS)
    report: dict[str, Any] = {"machine": machine(), "openvino": ov.get_version(), "rounds": args.rounds}
    report["ops"] = {name: found[0]["ops"] for name, found in runs.items()}
    report["steps"] = []
    for past in PASTS:
        entry: dict[str, Any] = {"past": past}
        for name, found in runs.items():
            values = [run["median_ms"][str(past)] for run in found]
            entry[name] = {"median_ms": statistics.median(values), "range_ms": [min(values), max(values)]}
            if name != "optimum":  # per round: the two processes ran side by side
                ratios = [run["median_ms"][str(past)] / theirs["median_ms"][str(past)]
                          for run, theirs in zip(found, runs["optimum"], strict=True)]  # fmt: skip
                entry[name]["over_optimum"] = {
                    "median": statistics.median(ratios),
                    "range": [min(ratios), max(ratios)],
                }
        print(entry, flush=True)
        report["steps"].append(entry)
    args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
