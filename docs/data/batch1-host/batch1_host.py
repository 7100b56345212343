"""Where a batch-1 decode step's time goes on the openvino runtime, and ours against OpenVINO
GenAI at batch 1, speculation off.

Part 1 (`split`): one request of 256 tokens through the engine, three times, with each step's
host time read apart from OpenVINO's infer: before it (inputs built), after it (tokens taken),
and the loop's turnaround (from one step's return on the compute thread to the next step's
start there). Part 2 (`against`): the same single request served by ours and by OpenVINO
GenAI's continuous batching, alternately, at two prompt lengths; each run's median gap between
tokens.

    python docs/data/batch1-host/batch1_host.py --openvino-python OVENV/bin/python \
        --json docs/data/batch1-host/batch1-host.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from adaptivespec.bench.machine import machine
from adaptivespec.bench.openvino_peer import OpenVINO
from adaptivespec.bench.traffic import Request, Served, percentile_ms
from adaptivespec.config import EngineConfig, ModelConfig
from adaptivespec.engine.demo_models import held_out_documents
from adaptivespec.engine.engine import Engine, compute_thread
from adaptivespec.engine.loader import LoadedModels, load_runner
from adaptivespec.engine.sampling import SamplingParams
from adaptivespec.engine.static_policy import FixedK

TOKENS = 256
PARAMS = SamplingParams(max_tokens=TOKENS, temperature=0.0, ignore_eos=True)


def ms(values: list[float]) -> float:
    return percentile_ms(values, 50)


async def serve(
    loaded: LoadedModels, config: EngineConfig, compute: ThreadPoolExecutor, prompt: list[int]
) -> Served:
    """Ours, one request, timed as `bench workload` times every engine's streams."""
    engine = Engine(loaded.runner, loaded.tokenizer, FixedK(0), config, compute=compute)
    await engine.start()
    served = Served(Request(0.0, prompt, TOKENS), time.perf_counter(), [], [])
    async for event in engine.submit(prompt, PARAMS):
        if event.token_ids:
            served.chunk_times.append(time.perf_counter())
            served.tokens.extend(event.token_ids)
    await engine.stop()
    return served


def split(
    loaded: LoadedModels, config: EngineConfig, compute: ThreadPoolExecutor, prompt: list[int], rounds: int
) -> list[dict[str, float]]:
    runner, target = loaded.runner, loaded.runner.target
    events: list[tuple[str, float]] = []
    run, decode = target._run, runner.decode

    def timed_run(*args: Any) -> Any:
        events.append(("infer_start", time.perf_counter()))
        out = run(*args)
        events.append(("infer_end", time.perf_counter()))
        return out

    def timed_decode(*args: Any) -> Any:
        events.append(("step_start", time.perf_counter()))
        out = decode(*args)
        events.append(("step_end", time.perf_counter()))
        return out

    target._run, runner.decode = timed_run, timed_decode  # type: ignore[method-assign]
    results = []
    try:
        for _ in range(rounds):
            events.clear()
            asyncio.run(serve(loaded, config, compute, prompt))
            before, infer, after, turnaround, last = [], [], [], [], {}
            for kind, at in events:
                if kind == "step_start" and "step_end" in last:
                    turnaround.append(at - last["step_end"])
                if kind == "infer_start" and "step_start" in last:
                    before.append(at - last["step_start"])
                if kind == "infer_end":
                    infer.append(at - last["infer_start"])
                if kind == "step_end" and "infer_end" in last:
                    after.append(at - last["infer_end"])
                last[kind] = at
            results.append(
                {
                    "before_infer_ms": ms(before),
                    "infer_ms": ms(infer),
                    "after_infer_ms": ms(after),
                    "turnaround_ms": ms(turnaround),
                    "steps": len(infer),
                }
            )
            print(results[-1], flush=True)
    finally:
        target._run, runner.decode = run, decode  # type: ignore[method-assign]
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--openvino-python", type=Path, required=True)
    parser.add_argument("--prompt-tokens", default="50,300")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(2)
    config = EngineConfig(threads=2, max_batch=32, max_context=1024, models=ModelConfig(runtime="openvino"))
    loaded = load_runner(config, progress=False)
    OpenVINO.check(args.openvino_python)
    peer = OpenVINO.prepare(args.openvino_python, loaded.target.path, 32)
    corpus = loaded.tokenizer.encode("\n".join(held_out_documents()), add_special_tokens=False)
    report: dict[str, Any] = {"machine": machine(loaded.runner.hardware_key), "tokens": TOKENS}
    compute = compute_thread()
    report["split"] = split(loaded, config, compute, corpus[:64], 3)
    report["against"] = []
    for length in (int(n) for n in args.prompt_tokens.split(",")):
        prompt = corpus[1000 : 1000 + length]
        ours, theirs = [], []
        for _ in range(args.rounds):  # alternating, so that drift falls on both
            ours.append(ms(asyncio.run(serve(loaded, config, compute, prompt)).gaps))
            served, _ = peer.serve([Request(0.0, prompt, TOKENS)], 0, 2)
            theirs.append(ms(served[0].gaps))
        entry = {
            "prompt_tokens": length,
            "ours_itl_p50_ms": ours,
            "openvino_itl_p50_ms": theirs,
            "ours_over_openvino": statistics.median(ours) / statistics.median(theirs),
        }
        print(entry, flush=True)
        report["against"].append(entry)
    compute.shutdown()
    args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
